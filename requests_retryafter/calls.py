"""One call of :meth:`RetryAfterAdapter.send`, decided without I/O: its budgets and verdicts.

The host's :class:`~requests_retryafter.engine.HostTracker` decides what a host's answers mean
(how long to wait after a 429/503, when the host is held, how to pace it). A
:class:`CallState` decides what that means for one call: whether its turn has come, whether
it may retry (its attempts, connection retries and deadline; whether its request may be sent
twice), and what a connection failure or a non-rejection answer means. Every outcome is a
:class:`~requests_retryafter.Decision`; the adapter sends, sleeps and raises as told, and
decides nothing itself.

Not thread-safe: a call is one thread's. :meth:`CallState.turn` asks the tracker for a slot, so
it runs under the host's lock like every tracker call.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from typing import List, Optional

from .decisions import Code, Decision, Event
from .engine import HostTracker
from .policy import Policy

__all__ = ["AUTH_STATUSES", "CallState", "Turn"]

#: Authentication answers: never retried.
AUTH_STATUSES = frozenset({401, 403, 407})
#: The shortest wait after a connection failure: a refused connection answers at once, and
#: a retry inside half a second is a hot loop against a restarting server.
MIN_CONNECTION_WAIT = 0.5
#: A wait before a request that ends this close to the one the call's own ``sleep`` decision
#: announced is that wait (clocks and rounding), not a new one.
ANNOUNCED_SLACK = 0.01

_WHERE = {"connect": "before reaching the server", "reset": "before any byte of the answer"}


@dataclass(frozen=True)
class Turn:
    """What a call does before its next request (:meth:`CallState.turn`).

    Attributes:
        wait: seconds to sleep first (0: send now, unless :attr:`stops`).
        decision: the decision to announce, if any: a ``wait`` (pacing, another call's
            refusal), a ``hold`` or a ``give_up``. A wait the call's own ``sleep`` decision
            already announced has none.
        shared: the request, once its wait is over, must also take its turn on the host's
            shared schedule (workers pacing the host together: see
            :meth:`CallState.scheduled`).
    """

    wait: float = 0.0
    decision: Optional[Decision] = None
    shared: bool = False

    @property
    def stops(self) -> bool:
        """Whether the call ends here: the host is held, or the deadline is too near."""
        return self.decision is not None and self.decision.event in (Event.HOLD, Event.GIVE_UP)


#: The turns of a healthy host's every request (a frozen dataclass costs a microsecond to
#: build): send now, alone or on the host's shared schedule.
_NOW = Turn()
_NOW_SHARED = Turn(shared=True)


class CallState:
    """The budgets of one call and what it decided so far.

    Args:
        host: the host key.
        policy: the budgets (``max_attempts``, ``connect_retries``, ``deadline``, backoff).
        started: the call's start, on the monotonic clock; its deadline is
            ``started + policy.deadline``.
        replayable: whether the request may be sent twice.
        why_not: why it may not, in words (when not ``replayable``).
        rng: the jitter's random source.

    Attributes:
        attempts: requests sent so far (the first included).
        refusals: 429/503 answers among them.
        connect_failures: connection failures so far.
        waits: waits slept before a request.
        waited: seconds slept in them.
        decisions: every decision announced for this call, in order (the adapter appends
            each as it announces it, the tracker's among them).
        deadline: the monotonic time by which the call must be done.
        left: seconds of the deadline left when the last give-up was decided.
    """

    def __init__(
        self,
        host: str,
        policy: Policy,
        started: float,
        *,
        replayable: bool = True,
        why_not: str = "",
        rng: Optional[random.Random] = None,
    ) -> None:
        self.host = host
        self.policy = policy
        self.deadline = started + policy.deadline
        self.replayable = replayable
        self.why_not = why_not
        self.rng = rng if rng is not None else random.Random()
        self.attempts = 0
        self.refusals = 0
        self.connect_failures = 0
        self.waits = 0
        self.waited = 0.0
        self.left = policy.deadline
        self.decisions: List[Decision] = []
        #: Epoch seconds of the slot on the host's shared schedule the request last sent
        #: went in (``None``: it went without one).
        self.sent_slot_at: Optional[float] = None
        #: Monotonic time the request last sent went (``None``: none went yet).
        self.sent_at: Optional[float] = None
        #: The host's number of the request last sent (``HostTracker.number``).
        self.seq: Optional[int] = None
        #: Whether that request went, beside others to its host on the wire (threads), past
        #: the places the host's statements left it (``HostTracker.outruns``).
        self.outran = False
        #: The host's turnstile while this call holds it (see ``Turns.take_turnstile``):
        #: let go while the adapter's ``on_decision`` hook runs, so that a hook sending to
        #: the host, or waiting for a thread that does, cannot stall it; taken back after
        #: the hook if no other call took it meanwhile (else the call goes on its reserved
        #: place without it).
        self.turnstile: Optional[threading.Lock] = None
        #: Whether the place this call last reserved was its period's last
        #: (``HostTracker.period_closing``): its request is answered before the next turn.
        self.closes_period = False
        self._slot_at: Optional[float] = None
        #: Monotonic time up to which a wait of this call was already announced (a sleep
        #: decision): waiting it out is no new decision.
        self._announced = -math.inf
        #: Whether the tracker gave this call a pacing slot it has not used yet.
        self._reserved = False

    # -- before a request --------------------------------------------------------------------

    def turn(self, tracker: HostTracker, mono: float, wall: float) -> Turn:
        """Decide what comes before the next request: a hold, a give-up, a wait, or nothing.

        A call whose paced wait is over sends on the slot it reserved, if no refusal came
        in between. A paced wait longer than ``max_sleep`` holds the host (the share of a long
        window is used up); a wait longer than what is left of the deadline gives up. A wait
        that another call's refusal set, beyond this call's own, is announced as such; one
        for the reset the host stated, as pacing."""
        policy = self.policy
        left, why, wait = tracker.gate_keeper.check(wall, mono)
        if left > 0:
            self._reserved = False
            return Turn(0.0, self._decision(Event.HOLD, 0.0, why, Code.HOLD, until=wall + left))
        if self._reserved:
            self._reserved = False
            if wait <= 0:
                return _NOW_SHARED if tracker.pacer.send_gap() is not None else _NOW
        paced = wait <= 0
        if paced:
            wait = tracker.reserve(mono, wall)
            self.closes_period = tracker.period_closing()
            if wait <= 0:
                return _NOW_SHARED if tracker.pacer.send_gap() is not None else _NOW
        if paced and wait > policy.max_sleep:
            tracker.release(mono)
            return self._held_for(
                "this adapter's share of the learned limit is used up; the next window starts "
                "in {:.0f} s, longer than max_sleep",
                wait,
                wall,
            )
        late = self._past_deadline("pacing" if paced else "the host's wait", wait, mono)
        if late is not None:
            if paced:
                tracker.release(mono)
            return Turn(0.0, late)
        if paced:
            self._reserved = True
            reason = tracker.pacing_reason()
            return Turn(wait, self._decision(Event.WAIT, wait, reason, Code.PACING))
        if mono + wait <= self._announced + ANNOUNCED_SLACK:
            return Turn(wait)
        if tracker.gate_keeper.at_stated_reset(mono, wait):
            reason = "the host said none of its window remains: waiting for the reset it states"
            return Turn(wait, self._decision(Event.WAIT, wait, reason, Code.PACING))
        extra = mono + wait - max(mono, self._announced)
        reason = "the host's wait after another call's rejection"
        if self._announced > mono:
            reason += f" ({extra:.1f} s more than this call's own)"
        return Turn(wait, self._decision(Event.WAIT, extra, reason, Code.SHARED_WAIT))

    @property
    def reserved(self) -> bool:
        """Whether the call holds a place it reserved in the host's pace, not yet used."""
        return self._reserved

    def scheduled(self, slot: float, mono: float, wall: float, workers: int) -> Turn:
        """The wait for this call's send on the host's shared schedule (its time ``slot``,
        epoch seconds, taken by the adapter at ``wall``): a ``wait`` for pacing, a hold when
        it is longer than ``max_sleep`` (no sleep is), or a give-up when it would pass the
        deadline. Nothing when the slot is now."""
        self._slot_at = max(slot, wall)
        wait = slot - wall
        if wait <= 0:
            return _NOW
        stop = self._past_schedule(wait, mono, wall)
        if stop is not None:
            return stop
        reason = f"taking turns with {workers - 1} other workers on the host's shared schedule"
        return Turn(wait, self._decision(Event.WAIT, wait, reason, Code.PACING))

    def queued(self, slot: float, wait: float, mono: float, wall: float, workers: int) -> Turn:
        """The wait before this call may take a send on the host's shared schedule: the next
        free one, at ``slot`` (epoch seconds, read at ``wall``), is further off than a
        send is taken ahead: the floor, or a gap if that is longer (see
        :func:`~requests_retryafter._search.early`). The call waits ``wait`` seconds and
        asks again; a hold or a give-up as for :meth:`scheduled`, judged by ``slot``."""
        stop = self._past_schedule(slot - wall, mono, wall)
        if stop is not None:
            return stop
        reason = (
            f"waiting with {workers - 1} other workers for the host's shared schedule's next "
            f"free send, {slot - wall:.1f} s away"
        )
        return Turn(wait, self._decision(Event.WAIT, wait, reason, Code.PACING))

    def _past_schedule(self, wait: float, mono: float, wall: float) -> Optional[Turn]:
        """A hold when a send on the host's shared schedule is ``wait`` seconds off, longer
        than ``max_sleep`` (no sleep is), or a give-up when it would pass the deadline."""
        if wait > self.policy.max_sleep:
            return self._held_for(
                "the host's shared schedule has no free send for {:.0f} s, longer than max_sleep",
                wait,
                wall,
            )
        late = self._past_deadline("the host's shared schedule", wait, mono)
        return None if late is None else Turn(0.0, late)

    def spaced(self, wait: float, mono: float) -> Turn:
        """The wait before a send on the host's shared schedule for the send before it, which
        went late (see :meth:`~requests_retryafter.state.HostState.with_send_spaced`): a
        ``wait`` for pacing, or a give-up when it would pass the deadline. Nothing when there
        is none."""
        if wait <= 0:
            return _NOW
        late = self._past_deadline("the host's shared schedule", wait, mono)
        if late is not None:
            return Turn(0.0, late)
        reason = "a gap after the last send on the host's shared schedule, which went late"
        return Turn(wait, self._decision(Event.WAIT, wait, reason, Code.PACING))

    def sent(self, mono: Optional[float] = None) -> None:
        """Count a request about to go on the wire (at ``mono``, monotonic, when known)."""
        self.attempts += 1
        self.sent_at = mono
        self.sent_slot_at, self._slot_at = self._slot_at, None

    def slept(self, seconds: float) -> None:
        """Count a wait slept before a request."""
        if seconds > 0:
            self.waits += 1
            self.waited += seconds

    # -- after a request ---------------------------------------------------------------------

    def answered(self, status: int, *, retry_after: bool = False) -> List[Decision]:
        """What an answer that is not a 429/503 means: an authentication answer is refused
        (never retried); a ``Retry-After`` on it is ignored."""
        out: List[Decision] = []
        if status in AUTH_STATUSES:
            reason = f"{status} is an authentication answer, never retried"
            out.append(self._decision(Event.REFUSE, 0.0, reason, Code.AUTH, status=status))
        if retry_after:
            reason = f"Retry-After on a {status} ignored: only 429 and 503 carry a wait"
            out.append(
                self._decision(Event.IGNORE, 0.0, reason, Code.HEADER_ON_SUCCESS, status=status)
            )
        return out

    def rejected(self, decision: Decision, mono: float) -> Decision:
        """What the host's decision on a 429/503 (``decision``, made by the tracker) means for
        this call: the decision itself when it is a retry or a hold, else a refusal (the
        request may not be sent twice) or a give-up (attempts or deadline used up).

        When the verdict is another decision, both are announced: the tracker's first."""
        self.refusals += 1
        if decision.event == Event.SLEEP:
            self._announced = max(self._announced, mono + decision.wait)
        status = decision.status
        if not self.replayable:
            reason = f"not retried: {self.why_not}; the {status} goes back to the caller"
            return self._decision(
                Event.REFUSE, decision.wait, reason, Code.NOT_REPLAYABLE, status=status
            )
        if decision.event == Event.HOLD:
            return decision
        if self.attempts >= self.policy.max_attempts:
            reason = f"all {self.policy.max_attempts} attempts used"
            return self._decision(
                Event.GIVE_UP, decision.wait, reason, Code.ATTEMPTS, status=status
            )
        late = self._past_deadline("the wait", decision.wait, mono, status=status)
        return decision if late is None else late

    def connection_failed(self, kind: Optional[str], error: str, mono: float) -> Decision:
        """What a connection or read failure means: a ``sleep`` before retrying, or a
        ``give_up`` (the caller gets the error unchanged).

        Retried only when plainly transient (``kind`` ``"connect"``: the request never
        reached the server; ``"reset"``: the connection broke before any byte of the answer),
        for a request that may be sent twice, within the attempts, the connection retries and
        the deadline. The wait is full-jitter exponential backoff (``backoff_base`` doubling
        per failure, at most ``backoff_cap``), at least :data:`MIN_CONNECTION_WAIT`."""
        policy = self.policy
        failures = self.connect_failures
        self.connect_failures += 1
        give_up = ""
        if kind is None:
            give_up = "not a transient failure, never retried"
        elif not self.replayable:
            give_up = f"not retried: {self.why_not}"
        elif self.attempts >= policy.max_attempts:
            give_up = f"all {policy.max_attempts} attempts used"
        elif failures >= policy.connect_retries:
            give_up = f"all {policy.connect_retries} connection retries used"
        backoff = min(policy.backoff_cap, policy.backoff_base * 2.0 ** min(failures + 1, 64))
        wait = min(max(MIN_CONNECTION_WAIT, self.rng.uniform(0.0, backoff)), policy.max_sleep)
        if not give_up and wait >= self.deadline - mono:
            give_up = f"the backoff of {wait:.1f} s is longer than what is left of the deadline"
        label = f"{error} {_WHERE.get(kind or '', '')}".rstrip()
        if give_up:
            return self._decision(Event.GIVE_UP, 0.0, f"{label}; {give_up}", Code.CONNECTION)
        return self._decision(Event.SLEEP, wait, f"{label}; own backoff", Code.CONNECTION)

    # -- helpers -----------------------------------------------------------------------------

    def _held_for(self, reason: str, wait: float, wall: float) -> Turn:
        """The turn that holds the host for a paced ``wait`` longer than ``max_sleep`` (at
        most ``max_hold``; ``reason`` is formatted with the seconds held)."""
        wait = min(wait, self.policy.max_hold)
        decision = self._decision(
            Event.HOLD, wait, reason.format(wait), Code.HOLD, until=wall + wait
        )
        return Turn(0.0, decision)

    def _past_deadline(
        self, what: str, wait: float, mono: float, *, status: int = 0
    ) -> Optional[Decision]:
        """The give-up when ``wait`` (what ``what`` needs) is longer than what is left of the
        deadline at ``mono`` (kept as :attr:`left`), else ``None``."""
        remaining = self.deadline - mono
        if wait <= remaining:
            return None
        self.left = max(0.0, remaining)
        reason = (
            f"{what} needs {wait:.1f} s, more than the {self.left:.1f} s left of the call's "
            f"deadline"
        )
        return self._decision(Event.GIVE_UP, wait, reason, Code.DEADLINE, status=status)

    def _decision(
        self,
        event: Event,
        wait: float,
        reason: str,
        code: Code,
        *,
        status: int = 0,
        until: float = 0.0,
    ) -> Decision:
        return Decision(
            event,
            self.host,
            wait,
            reason,
            status=status,
            attempt=self.attempts,
            until=until,
            code=code,
        )
