"""The adapter's retry loop: send, sleep and raise as a call and its host's tracker decide.

:class:`Sending` does the I/O of one call of
:class:`~requests_retryafter.adapter.RetryAfterAdapter` (``send()`` hands it the call, the
host and a plain ``HTTPAdapter.send``): it waits for the call's turn, sends, records what
came back, releases a rejection's connection and sleeps or raises as decided. What to do is
decided elsewhere (:mod:`._turns`, :mod:`.calls`, :mod:`.engine`). When this library's own
logic fails, the request goes on as a plain ``HTTPAdapter`` would send it, and the host's
next request still waits the floor after a rejection.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Dict, Optional

import requests

from ._compat import failure_kind
from ._hosts import Host
from ._transport import (
    TimeoutArg,
    body_position,
    cap_timeout,
    drain,
    read_timeout,
    replayable,
)
from ._turns import Turns, error_for
from .calls import CallState
from .clock import Clock
from .decisions import Decision, Event
from .engine import HostTracker
from .policy import Policy

__all__ = ["REJECTIONS", "Sending", "Transport"]

#: The adapter's log: what this module logs is the adapter's doing (users filter on it).
log = logging.getLogger("requests_retryafter.adapter")

#: Statuses that carry a meaningful Retry-After and are retried.
REJECTIONS = frozenset({429, 503})

#: A plain ``HTTPAdapter.send`` (the adapter's own, bound).
Transport = Callable[..., requests.Response]


class Sending:
    """The retry loop of a :class:`~requests_retryafter.adapter.RetryAfterAdapter`: its
    ``policy``, ``clock``, ``turns`` (the waits before each send, the recording of each
    answer) and ``emit`` (how decisions are announced)."""

    def __init__(
        self, policy: Policy, clock: Clock, turns: Turns, emit: Callable[[Decision], None]
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.turns = turns
        self.emit = emit

    def send(
        self,
        host: Host,
        request: requests.PreparedRequest,
        timeout: TimeoutArg,
        transport: Transport,
        kw: Dict[str, Any],
        call: CallState,
    ) -> requests.Response:
        """Send ``request`` through ``transport`` (a plain ``HTTPAdapter.send``, given the
        caller's other arguments, ``kw``), and sleep, as ``call`` and the host's tracker
        decide: the response to return, or the error ``call`` ends with. ``timeout``: the
        caller's (each attempt's is capped by the call's deadline)."""
        clock, turns = self.clock, self.turns
        response: Optional[requests.Response] = None
        #: A response in hand that was neither drained nor returned (for the fallback).
        pending: Optional[requests.Response] = None
        #: The transport is running: what it raises goes to the caller unchanged.
        sending = False
        sent = timeout
        phase = "preparing"
        body_pos: Optional[int] = None
        try:
            call.replayable, call.why_not = replayable(request)
            body_pos = body_position(request)
            while True:
                phase = "waiting for the host's turn"
                turns.wait_for_turn(host, response, request, call)
                failure: Optional[Decision] = None
                verdict: Optional[Decision] = None
                numbered = False  # (on the wire, or its answer not yet recorded)
                waited = host.slots.acquire()
                try:
                    # Waiting for a slot may have outlasted another thread's rejection: look
                    # again (a slot free at once came too soon after the turn for that).
                    if waited:
                        with host.lock:
                            if host.tracker.gate(clock.monotonic(), clock.time()) > 0:
                                continue
                    began = clock.monotonic()
                    call.sent(began)
                    if call.attempts > 1 and body_pos is not None:
                        request.body.seek(body_pos)  # type: ignore[union-attr]
                    sent = cap_timeout(timeout, call.deadline - began)
                    tracker = host.tracker
                    with host.lock:
                        call.seq = tracker.number()  # (numbered in turn)
                        call.outran = tracker.outruns(call.seq)
                        first = call.closes_period or tracker.answered_first(call.seq)
                    numbered = True
                    if not first:
                        # The next call's turn may come while this request is on the wire
                        # (while the host refuses, after its period's last place, for the
                        # run's first request to the host, or at the last place the host's
                        # statements leave, only once this one and those on the wire
                        # beside it are back: see Turns.take_turnstile).
                        _leave(call)
                    call.closes_period = False
                    sending = True
                    try:
                        response = transport(request, timeout=sent, **kw)
                    except (
                        requests.exceptions.ConnectionError,
                        requests.exceptions.Timeout,
                    ) as exc:
                        sending = False
                        phase = "deciding on a connection error"
                        pending = response = None
                        failure = call.connection_failed(
                            failure_kind(exc), type(exc).__name__, clock.monotonic()
                        )
                        numbered = _returned(host, tracker)
                        self.emit(failure)
                        if failure.event == Event.GIVE_UP:
                            raise
                    else:
                        sending = False
                        pending = response
                        # Record the outcome before another thread may take this slot.
                        if response.status_code not in REJECTIONS:
                            phase = "recording an answer"
                            turns.answered(host, response, call)
                            numbered = _returned(host, tracker)
                            _all_back(host, call, sent)
                            return response
                        phase = "deciding on a rejection"
                        verdict = turns.rejected(host, response, call)
                        numbered = _returned(host, tracker)
                        if verdict.event == Event.REFUSE:
                            return response
                finally:
                    host.slots.release()
                    if numbered:
                        _returned(host, host.tracker)
                _all_back(host, call, sent)
                _leave(call)
                if verdict is not None:
                    # Outside the slot and the host's lock: no call's body-reading holds up
                    # another.
                    phase = "releasing a rejection"
                    assert response is not None
                    pending = None
                    drain(response, call.deadline - clock.monotonic(), sent)
                    if verdict.event != Event.SLEEP:
                        raise error_for(verdict, call, response, request)
                if failure is not None:
                    phase = "backing off"
                    turns.sleep(call, failure.wait)
        except requests.exceptions.RequestException:
            raise
        except Exception as exc:
            _leave(call)
            if sending:
                raise  # the transport's own error: as a plain adapter gives it
            self._internal_error(host, phase, exc)
            answered = pending if pending is not None else response
            if answered is not None and answered.status_code in REJECTIONS:
                # Nothing went since this rejection: it is what a plain adapter returns, and
                # sending again now would skip the wait after it (the floor at least, which
                # the host's next request now waits).
                self._floor_after(host)
                return answered
            if pending is not None:
                return pending
            if call.attempts > 0 and body_pos is not None:
                with contextlib.suppress(Exception):
                    request.body.seek(body_pos)  # type: ignore[union-attr]
            # The engine may be what failed, and with it the host's wait: the adapter keeps
            # the floor after a rejection on its own.
            with contextlib.suppress(Exception):
                wait = min(host.floor_until - clock.monotonic(), self.policy.min_sleep)
                if wait > 0:
                    turns.sleep(call, wait)
            response = transport(request, timeout=timeout, **kw)
            if response.status_code in REJECTIONS:
                self._floor_after(host)
            return response
        finally:
            _leave(call)

    def _internal_error(self, host: Host, phase: str, exc: BaseException) -> None:
        """Log a failure of this adapter's own logic (ERROR, with the host; the traceback the
        first time for that host)."""
        host.internal_errors += 1
        log.error(
            "%s: internal error %s (%s: %s); the request goes on as a plain HTTPAdapter "
            "would send it",
            host.tracker.host,
            phase,
            type(exc).__name__,
            exc,
            exc_info=host.internal_errors == 1,
        )

    def _floor_after(self, host: Host) -> None:
        """After an internal error on a rejection (returned to the caller as it is): the
        host's next request waits the floor at least. A caller that loops without looking
        at the status (as many scripts do, and a benchmark's client did) would otherwise
        send again at once, hundreds of times a second, for as long as the error lasts.
        The floor is also kept outside the engine, for requests sent by the fallback path
        (the engine may be what fails before each send)."""
        with contextlib.suppress(Exception):
            until = host.floor_until = self.clock.monotonic() + self.policy.min_sleep
            with host.lock:
                tracker = host.tracker
                tracker.gate_keeper.wait_until(until)
            log.warning(
                "%s: the host's next request waits %g s (min_sleep) after that rejection",
                tracker.host,
                self.policy.min_sleep,
            )


def _returned(host: Host, tracker: HostTracker) -> bool:
    """A request to ``host`` numbered by ``tracker`` came back and its answer (or failure)
    is recorded (``HostTracker.returned``); wake the call waiting for every one to be back
    (:func:`_all_back`) once none is left. Returns ``False`` (the request is no longer
    counted by the caller)."""
    with host.lock:
        tracker.returned()
        if tracker.on_wire <= 0:
            host.back.notify_all()
    return False


def _all_back(host: Host, call: CallState, timeout: TimeoutArg) -> None:
    """If ``call`` kept the host's turnstile while its request was on the wire, wait until
    the requests that went beside it are back too (their answers recorded) before it lets
    the turnstile go: the host may count them after this one, and the next turn is to be
    judged on what every answer says (a thread pool's last place of a window, answered
    before another request's that the host counted later, let a request go past it).
    Bounded by the request's ``timeout`` (its read timeout, of a pair or of urllib3's
    ``Timeout``; ``Policy.max_sleep`` without one): a request stuck on the wire does not
    hold the others for good."""
    if call.turnstile is None:
        return
    tracker = host.tracker
    read = read_timeout(timeout)
    bound = tracker.policy.max_sleep if read is None else read
    with host.lock:
        if tracker.on_wire > 0:
            host.back.wait_for(
                lambda: tracker.on_wire <= 0, timeout=min(bound, threading.TIMEOUT_MAX)
            )


def _leave(call: CallState) -> None:
    """Let go of the host's turnstile if ``call`` holds it."""
    turnstile, call.turnstile = call.turnstile, None
    if turnstile is not None:
        turnstile.release()
