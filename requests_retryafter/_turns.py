"""The host's side of each send: before it, the call waits for its turn (the host's wait,
its pacing, its slot on the workers' shared schedule); after it, the host's tracker (and the
shared schedule) learns what the host answered. The calls decide (:mod:`.calls`) and the
tracker learns (:mod:`.engine`); this does their store updates, sleeps and raises."""

from __future__ import annotations

import logging
import threading
from typing import Callable, List, Optional

import requests

from ._hosts import Host, Hosts
from .calls import AUTH_STATUSES, CallState, Turn
from .clock import Clock
from .decisions import Code, Decision, Event
from .errors import (
    HostHeld,
    RetryAfterError,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
    utc_iso,
)
from .parsing import parse_rate_limit, parse_retry_after
from .state import HostState

__all__ = ["Turns", "error_for"]

#: The adapter's logger: what this module logs is the adapter's doing, under its name.
log = logging.getLogger("requests_retryafter.adapter")

#: The headers that state a limit (any generation), by lowercase name.
_STATED_LIMIT_FIELDS = (
    "ratelimit-policy",
    "ratelimit",
    "ratelimit-limit",
    "ratelimit-remaining",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-rate-limit-limit",
    "x-rate-limit-remaining",
)


class Turns:
    """Waiting for each call's turn on a host, and recording the host's answers.

    Args:
        hosts: the adapter's hosts and store.
        clock: the adapter's clock.
        emit: announces a decision (to the call's trace, the log, the adapter's hook).
    """

    def __init__(self, hosts: Hosts, clock: Clock, emit: Callable[[Decision], None]) -> None:
        self.hosts = hosts
        self.clock = clock
        self._emit = emit

    def sleep(self, call: CallState, seconds: float) -> None:
        """Wait ``seconds`` on the adapter's clock, counted as one wait of ``call``."""
        call.slept(seconds)
        self.clock.sleep(seconds)

    # -- before a send ------------------------------------------------------------------------

    def wait_for_turn(
        self,
        host: Host,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
        call: CallState,
    ) -> None:
        """Wait as the call's turn decides (the host's shared wait, its pacing slot); raise
        if the host is held or the call out of time. The call takes the host's turnstile
        first (see :meth:`take_turnstile`), and again before each turn it asks without a
        place reserved if a hook let it go."""
        self.take_turnstile(host, call)
        with host.lock:
            self.hosts.sync(host)
            clear = host.tracker.clear(self.clock.monotonic())
        if host.news:
            self.hosts.announce(host)
        if clear:
            return  # nothing before this send (most requests to a healthy host)
        # Otherwise the call's turn decides: as long as it makes the call wait, wait, and
        # ask again.
        clock, tracker = self.clock, host.tracker
        policy = self.hosts.policy
        # After a wait for the host's wait (a refusal's), or a paced wait of the floor or
        # longer, the host's entry is synced before the send, not only every
        # ``sync_interval``: other workers may have met a refusal or started the shared
        # schedule meanwhile. A worker that was not refused itself waited for a
        # stated reset and then burst alone into the others' schedule, whose refusal stopped
        # all of them for the floor. One sync per such wait (this worker's news written, the
        # others' read), and one for the threads that waited together: a sync since the
        # wait began is enough. A wait for the host's wait (this worker's refusal's or
        # another's) counts however short: it is counted down from the refusal, and the
        # floor's rest, a few milliseconds short of it, came back from the workers' first
        # refusal together without reading the others (whose turns spread them). Not after
        # a paced wait shorter than the floor (nor any without a floor, ``min_sleep`` 0):
        # every paced request would sync.
        waited_from: Optional[float] = None
        while True:
            if call.turnstile is None and not call.reserved:
                self.take_turnstile(host, call)
            with host.lock:
                stale = waited_from is not None and host.last_sync <= waited_from
                # A worker alone counts the others before each turn (see Hosts.sync).
                self.hosts.sync(host, force=stale, count=True)
                waited_from = None
                turn = call.turn(tracker, clock.monotonic(), clock.time())
            self.hosts.announce(host)
            if turn.decision is not None:
                self._emit(turn.decision)
                if turn.stops:
                    raise error_for(turn.decision, call, response, request)
            if turn.wait <= 0:
                if not turn.shared or self._take_turn(host, call, response, request):
                    return
                continue  # waited for the schedule's next free send to come near: ask again
            started = clock.monotonic()
            self.sleep(call, turn.wait)
            refusal = turn.decision is None or turn.decision.code is Code.SHARED_WAIT
            if self.hosts.guarded.shared and (refusal or 0 < policy.min_sleep <= turn.wait):
                waited_from = started

    def take_turnstile(self, host: Host, call: CallState) -> None:
        """Take the host's turnstile (:attr:`Host.turnstile`, kept as ``call.turnstile``)
        unless the call holds it (not taken within what is left of the call's deadline, the
        call's turn then gives up, or it goes without it); ``Sending`` lets it go.

        Threads sharing one adapter come to a host one at a time, so that they pace it as
        one client does. Each reserves its place in the pace only once the call before it
        sent, so that a pace that changes meanwhile (a probe that holds, a refusal) times
        the next request, not only those reserved after a queue of the others' places:
        eight threads, each with a place reserved a gap after the last, put every step of
        the search for nginx's 10 a second eight gaps off, and their sends, 1.4 a second.
        While the host refuses, the turnstile is held until the request's answer: the
        threads waiting out the host's wait would otherwise all retry at its end, and a
        bucket that refills one request at a time refuses all but one of them. So it is
        after a period's last place (``HostTracker.period_closing``): the next reservation
        closes the period and judges it (a probe held) by the answers in by then; for the
        run's first request to the host, and at the last place the host's statements of
        what remains leave (``HostTracker.answered_first``): threads sending past it
        together are refused together. Held so, it is let go once the requests on the wire
        beside the call's are back too (``Sending``). The ``on_decision`` hook lets it go (see
        ``CallState.turnstile``)."""
        if call.turnstile is not None:
            return
        turnstile = host.turnstile
        if turnstile.acquire(blocking=False):  # (most calls: no clock read)
            call.turnstile = turnstile
            return
        left = call.deadline - self.clock.monotonic()
        if turnstile.acquire(timeout=max(0.0, min(left, threading.TIMEOUT_MAX))):
            call.turnstile = turnstile

    def _take_turn(
        self,
        host: Host,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> bool:
        """Take this call's send on the host's shared schedule (one atomic store update, in
        which the shared search moves on too) and wait for it. ``False`` when the next free
        send was further off than a send is taken ahead (the call waited until it comes
        near: see :func:`~requests_retryafter._search.early`), or when the host's entry, read
        in those updates, sets a wait for the host (another worker's refusal): the call asks
        for its turn again.
        Without the store (it failed), the call takes its turn on this adapter's copy of the
        schedule, at its share of the rate."""
        tracker, clock, hosts = host.tracker, self.clock, self.hosts
        key = tracker.host
        taken: List[float] = []

        def moved(current: Optional[HostState]) -> HostState:
            # The time of this attempt at the update (a contended store retries it): a slot
            # taken at a stale time would go closer to the previous send than the gap.
            now = clock.time()
            checked = hosts.checked(key, current)
            wait = tracker.workers.early(checked, now)
            if wait > 0 and checked is not None:
                taken[:] = [checked.next_send, now, 0.0, wait]
                return checked  # the entry as it was (checked() returns it): nothing to write
            state, slot = tracker.workers.take_send(checked, now)
            spacing = 0.0
            if slot <= now:
                # The send goes now: it is spaced from the last one in this same update.
                state, spacing = tracker.workers.space_send(state, now)
            taken[:] = [slot, now, spacing, 0.0]
            return state

        stored = hosts.guarded.call("update", key, moved)
        with host.lock:
            if not (taken and hosts.merge_in(host, stored, taken[1])):
                now = clock.time()
                tracker.state, slot = tracker.workers.take_send(tracker.state, now, alone=True)
                taken[:] = [slot, now, 0.0, 0.0]
        hosts.announce(host)
        slot, taken_at, spacing, wait = taken
        if wait > 0:
            self._follow(
                call.queued(slot, wait, clock.monotonic(), taken_at, tracker.share),
                call,
                response,
                request,
            )
            return False
        turn = call.scheduled(slot, clock.monotonic(), taken_at, tracker.share)
        self._follow(turn, call, response, request)
        if turn.wait > 0:
            self._space_send(host, call, response, request)
        else:
            self._follow(call.spaced(spacing, clock.monotonic()), call, response, request)
        with host.lock:
            # The updates read the host's entry: a refusal another worker met meanwhile set
            # a wait for the host, and this send waits for it too (its turn is asked again).
            return tracker.gate(clock.monotonic(), clock.time()) <= 0

    def _space_send(
        self,
        host: Host,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> None:
        """After waiting for a slot on the host's shared schedule, just before the send, in one
        atomic store update: record it, and wait until a gap after the last send that went
        (the worker before this one may have woken late for its slot: see
        :meth:`~requests_retryafter.state.HostState.with_send_spaced`). The update also reads
        a refusal another worker met while this one waited (:meth:`_take_turn` looks at the
        host's wait again). Without the store, nothing more: this worker's own sends are
        spaced."""
        tracker, clock, hosts = host.tracker, self.clock, self.hosts
        key = tracker.host
        spaced: List[float] = []

        def sent_now(current: Optional[HostState]) -> HostState:
            now = clock.time()
            state, wait = tracker.workers.space_send(hosts.checked(key, current), now)
            spaced[:] = [wait, now]
            return state

        stored = hosts.guarded.call("update", key, sent_now)
        with host.lock:
            merged = bool(spaced) and hosts.merge_in(host, stored, spaced[1])
        hosts.announce(host)
        if not merged:
            return
        self._follow(call.spaced(spaced[0], clock.monotonic()), call, response, request)

    def _follow(
        self,
        turn: Turn,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> None:
        """Carry out a turn on the host's shared schedule: announce its decision, raise if it
        stops the call, sleep its wait."""
        if turn.decision is not None:
            self._emit(turn.decision)
            if turn.stops:
                raise error_for(turn.decision, call, response, request)
        if turn.wait > 0:
            self.sleep(call, turn.wait)

    # -- after a send ---------------------------------------------------------------------------

    def answered(self, host: Host, response: requests.Response, call: CallState) -> None:
        """Record a response that is not a rejection, and announce what the call makes of it."""
        tracker = host.tracker
        status = response.status_code
        # The headers' lowercase names: requests' CaseInsensitiveDict keeps them as its
        # ``_store``'s keys (no copy); any other mapping's are made.
        store = getattr(response.headers, "_store", None)
        names = store.keys() if isinstance(store, dict) else {n.lower() for n in response.headers}
        if 200 <= status < 300:
            clock = self.clock
            with host.lock:
                mono, wall = clock.monotonic(), clock.time()
                closing = tracker.episode is not None
                decision = tracker.on_success(mono, wall, sent=call.sent_at, seq=call.seq)
                if not names.isdisjoint(_STATED_LIMIT_FIELDS):
                    tracker.on_stated_limit(
                        parse_rate_limit(
                            response.headers,
                            now=host.server_clock.now(
                                response.headers, wall, _sent(call, mono, wall)
                            ),
                        ),
                        mono,
                        wall,
                        sent=call.sent_at,
                        seq=call.seq,
                    )
                if closing:  # an episode ended: worth writing now; the rest waits its turn
                    self.hosts.sync(host, force=True)
            if host.news:
                self.hosts.announce(host)
            if decision is not None:
                self._emit(decision)
        retry_after = "retry-after" in names
        if status not in AUTH_STATUSES and not retry_after:
            return  # (most answers: nothing for the call to decide)
        for decision in call.answered(status, retry_after=retry_after):
            if decision.code == Code.HEADER_ON_SUCCESS and not host.warned_ignore:
                host.warned_ignore = True
                log.info("%s: %s (logged once per host)", decision.host, decision.reason)
            self._emit(decision)

    def rejected(self, host: Host, response: requests.Response, call: CallState) -> Decision:
        """Tell the tracker of a 429/503 and return the call's verdict: a ``sleep`` to retry,
        a ``refuse`` to return the response, a ``hold`` or ``give_up`` to raise."""
        clock, tracker = self.clock, host.tracker
        with host.lock:
            mono, wall = clock.monotonic(), clock.time()
            # (Epoch resets and HTTP-dates are read on the host's clock.)
            stated_now = host.server_clock.now(response.headers, wall, _sent(call, mono, wall))
            parsed = parse_retry_after(response.headers.get("Retry-After"), now=stated_now)
            info = parse_rate_limit(response.headers, now=stated_now)
            decision = tracker.on_rejection(
                response.status_code,
                parsed,
                info,
                mono,
                wall,
                call.attempts,
                call.seq,
                outran=call.outran,
            )
            _shared_refusal(self.hosts, host, call, wall)
            self.hosts.sync(host, force=True)
        self.hosts.announce(host)
        self._emit(decision)
        verdict = call.rejected(decision, clock.monotonic())
        if verdict is not decision:
            self._emit(verdict)
        return verdict


def error_for(
    decision: Decision,
    call: CallState,
    response: Optional[requests.Response],
    request: requests.PreparedRequest,
) -> RetryAfterError:
    """The exception a ``hold`` or ``give_up`` decision ends the call with."""
    key = decision.host
    if decision.event == Event.HOLD:
        return HostHeld(
            f"{key} is held until {utc_iso(decision.until)}: {decision.reason}",
            host=key,
            until=decision.until,
            reason=decision.reason,
            response=response,
            request=request,
        )
    if decision.code == Code.ATTEMPTS:
        return RetryLimitExceeded(
            f"{key}: {decision.reason}; last status {decision.status}",
            host=key,
            response=response,
            request=request,
        )
    return RetryDeadlineExceeded(
        f"{key}: {decision.reason}",
        host=key,
        delay=decision.wait,
        remaining=call.left,
        response=response,
        request=request,
    )


def _shared_refusal(hosts: Hosts, host: Host, call: CallState, wall: float) -> None:
    """Tell ``host``'s shared search (in ``hosts``' store) of ``call``'s refusal at ``wall``
    (one atomic store update; under ``host.lock``); a hold says nothing of the rate."""
    tracker = host.tracker
    episode = tracker.episode
    if tracker.pacer.send_gap() is None or episode is None or call.sent_slot_at is None:
        return
    if tracker.held(wall):
        return
    key, slot_at, first = tracker.host, call.sent_slot_at, episode.fails == 1
    # The workers send again when the host's wait ends (on_rejection just set it; no
    # wait lasts longer than a sleep).
    resume = min(max(tracker.state.blocked_until, wall), wall + tracker.policy.max_sleep)

    def refused(current: Optional[HostState]) -> HostState:
        return tracker.workers.shared_refusal(
            hosts.checked(key, current), slot_at, wall, first=first, resume=resume
        )

    if not hosts.merge_in(host, hosts.guarded.call("update", key, refused), wall):
        tracker.state = tracker.workers.shared_refusal(
            tracker.state, slot_at, wall, first=first, resume=resume, alone=True
        )


def _sent(call: CallState, mono: float, wall: float) -> Optional[float]:
    """When ``call``'s last request went, in epoch seconds (``mono``/``wall``: now), or
    ``None`` if unknown."""
    return None if call.sent_at is None else wall - (mono - call.sent_at)
