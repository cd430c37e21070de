"""The per-host engine: episodes, decisions, learned limits and pacing.

Pure of I/O: a :class:`HostTracker` is told what happened (a 2xx, a rejection, a stated limit)
and the time, and answers with decisions. The adapter does the HTTP, the sleeping and the
storing. Not thread-safe by itself: the adapter calls it under the host's lock.

The tracker is a façade over the engine's parts, which share one
:class:`~requests_retryafter._context.HostContext` (the host's state and the settings): the
pacer (:mod:`~requests_retryafter._pacer`, with the probes of
:mod:`~requests_retryafter._prober`), the decision on a rejection
(:mod:`~requests_retryafter._decide`), the episode record
(:mod:`~requests_retryafter._episodes`), the limit learner
(:mod:`~requests_retryafter._learner`, with :mod:`~requests_retryafter._lattice`), the
stated limits (:mod:`~requests_retryafter._stated`), the workers sharing the host
(:mod:`~requests_retryafter._workers`, ``HostTracker.workers``, and their schedule,
:mod:`~requests_retryafter._schedule`) and the gates (the host's shared wait and hold,
:mod:`~requests_retryafter._gates`). The tracker itself keeps the episode under way and the
counts between episodes (the cycles of successes since the last recovery and the last
turn), and judges the host's category.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Optional, Tuple

from ._context import HostContext
from ._decide import Decider
from ._episodes import Episode
from ._gates import Gates
from ._learner import LimitLearner, Recovery
from ._pacer import Pacer
from ._prober import carry
from ._stated import StatedLimits
from ._workers import Workers
from .categories import judge
from .decisions import Code, Decision, Event
from .parsing import ParsedRetryAfter, RateLimitInfo
from .policy import Policy
from .state import Category, HostState, Observation
from .tuning import TUNING, Tuning

__all__ = ["Decision", "Event", "HostTracker"]


class HostTracker:
    """What one adapter knows and does about one host.

    Args:
        state: the host's state to start from (from the store, or a new one).
        policy: the adapter's policy.
        rng: the random source for jitter.
        worker: this adapter's id among the workers sharing a store.
        tuning: the engine's thresholds.
    """

    def __init__(
        self,
        state: HostState,
        policy: Policy,
        rng: random.Random,
        worker: str = "",
        *,
        tuning: Tuning = TUNING,
    ) -> None:
        self._ctx = ctx = HostContext(state, policy, rng, worker, tuning)
        self._stated = StatedLimits(ctx)
        #: The host's pacer (:mod:`~requests_retryafter._pacer`): when the next request may
        #: go, at what rate and budget, and whether workers share one schedule.
        self.pacer = Pacer(ctx, self._stated.trial)
        self._decider = Decider(ctx, self.pacer)
        self._learner = LimitLearner(ctx, self.pacer)
        #: The workers sharing the host through the store, and their shared schedule.
        self.workers = Workers(ctx, self.pacer)
        #: The host's shared wait and hold, as this adapter counts them down.
        self.gate_keeper = Gates(ctx, self.pacer)
        self.episode: Optional[Episode] = None
        self._since = _Since()
        self._wire = _Wire()  # the requests numbered, and those on the wire

    # -- the shared context --------------------------------------------------------------

    @property
    def state(self) -> HostState:
        """The host's state (what the store keeps)."""
        return self._ctx.state

    @state.setter
    def state(self, state: HostState) -> None:
        self._ctx.state = state

    @property
    def dirty(self) -> bool:
        """Whether the state changed in a way worth writing to the store soon."""
        return self._ctx.dirty

    @dirty.setter
    def dirty(self, dirty: bool) -> None:
        self._ctx.dirty = dirty

    @property
    def share(self) -> int:
        """Workers pacing this host together (1 unless a shared store says otherwise)."""
        return self._ctx.share

    @share.setter
    def share(self, share: int) -> None:
        self._ctx.share = share

    @property
    def host(self) -> str:
        """The host's key."""
        return self._ctx.host

    @property
    def policy(self) -> Policy:
        """The adapter's policy."""
        return self._ctx.policy

    @property
    def tuning(self) -> Tuning:
        """The engine's thresholds."""
        return self._ctx.tuning

    # -- gates ---------------------------------------------------------------------------

    def held(self, wall: float, mono: Optional[float] = None) -> bool:
        """Whether the host is held at wall-clock time ``wall`` (see :meth:`hold`)."""
        return self.hold(wall, mono)[0] > 0

    def hold(self, wall: float, mono: Optional[float] = None) -> Tuple[float, str]:
        """``(seconds left, reason)`` of the host's hold at ``wall`` (``(0, "")`` when none).

        A hold lasts at most ``max_hold`` and no longer than it was granted for. A shared wait
        longer than this adapter's ``max_sleep`` (set by another worker with a larger
        ``max_sleep``, or kept in the store) is a hold too: no single sleep exceeds
        ``max_sleep``.
        """
        left, why, _ = self.gate_keeper.check(wall, mono)
        return left, why

    def clear(self, mono: float) -> bool:
        """Whether a request may go at ``mono`` (monotonic) with no wait and nothing decided:
        no hold or wait stands before it and nothing paces the host (most requests to a
        healthy host). Only for a worker alone: workers sharing the host come back from a
        wait in turns, and may send on a shared schedule. ``False`` when in doubt: a call's
        turn then decides."""
        return self._ctx.share <= 1 and self.gate_keeper.clear(mono) and self.pacer.unpaced()

    def gate(self, mono: float, wall: float) -> float:
        """Seconds to wait before a request may go (shared wait, including other workers')."""
        return self.gate_keeper.shared_wait(wall, mono)

    def closing(self, wall: float) -> None:
        """The adapter closes at ``wall``: a step up under way is kept for the next run."""
        carry(self.pacer.probes, wall)

    def heartbeat(self, wall: float) -> bool:
        """Record this worker as pacing the host (shared stores), and count the workers
        (see :class:`~requests_retryafter._workers.Workers`); whether it was recorded."""
        return self.workers.heartbeat(wall, refusing=self.episode is not None)

    def reserve(self, mono: float, wall: float) -> float:
        """Reserve the next request's place; return seconds to wait for it (0: go now).

        With a learned window, up to ``burst`` requests go at once at the start of each
        window (counted from the last recovery, which is a window start); the next waits for
        the following window. With only a stated rate, requests are spaced evenly.
        """
        return self.pacer.reserve(mono, wall, refusing=self.episode is not None)

    def release(self, mono: float) -> None:
        """Give back the last reserved place (the call stopped before using it)."""
        self.pacer.release(mono)

    def number(self) -> int:
        """Number a request about to go, for its answer (see :meth:`on_success` and
        :meth:`on_rejection`): whether it went before a rejection episode began is told by
        its number, whatever the clock's resolution (two readings of a coarse clock, or a
        virtual one, are often equal). It is on the wire until :meth:`returned`."""
        return self._wire.number()

    @property
    def on_wire(self) -> int:
        """Requests numbered (:meth:`number`) and not yet back with their answers recorded
        (:meth:`returned`): several at once only with threads sharing the adapter."""
        return self._wire.on_wire

    def returned(self) -> None:
        """A request numbered by :meth:`number` came back (answered, or failed on the way)
        and its answer is recorded."""
        self._wire.returned()

    def period_closing(self) -> bool:
        """Whether the place just reserved (see :meth:`reserve`) was the last of its
        period's budget. The next reservation closes the period, and judges it (a probe
        held, or one starts) by the answers in by then: the adapter's threads send the
        next only once this one is answered."""
        return self.pacer.last_place

    def answered_first(self, seq: int) -> bool:
        """Whether the request numbered ``seq`` (:meth:`number`) is to be answered before
        the next goes: the run's first to the host (its answer may say what the host
        allows), the host refuses, or what its statements say remains, less the requests
        numbered since, leaves this one at most the last place. Threads sending together
        past a window's last place are refused together; its answer says when the next
        place frees, or that a new window opened."""
        if self.episode is not None or not self._wire.back:
            return True
        places = self._stated.places(seq, self._wire.on_wire - 1)
        return places is not None and places <= 1

    def outruns(self, seq: int) -> bool:
        """Whether the request numbered ``seq`` goes beside others of the run on the wire
        (threads) past the places the host's statements of what remains leave it: a
        refusal of it then says only that the threads outran the statements (see
        :meth:`on_rejection`)."""
        on_wire = self._wire.on_wire
        if on_wire <= 1 or not self._ctx.counted:
            return False
        places = self._stated.places(seq, on_wire - 1)
        return places is not None and places <= 0

    def pacing_reason(self) -> str:
        """Why a wait for a reserved place (see :meth:`reserve`) is one, for its decision."""
        if self._stated.trial.pace() is not None:
            return (
                "pacing evenly below the host's stated rate, which its statements of what "
                "remains did not reach"
            )
        return "pacing below the host's learned limit"

    # -- what happened ------------------------------------------------------------------

    def on_success(
        self, mono: float, wall: float, sent: Optional[float] = None, seq: Optional[int] = None
    ) -> Optional[Decision]:
        """Record a 2xx answered at ``mono`` to a request sent at ``sent`` (monotonic;
        ``mono`` if unknown), numbered ``seq`` (:meth:`number`; ``None``: unknown). Returns a
        category-change decision when the host was re-judged.

        A cycle of successes is counted from when its first request went: a window that
        request opened began when it arrived, no sooner. A request that went before the
        episode under way began (another thread's, on the wire with the one refused) is
        no recovery: the host let it through before it refused (answered later, it ended
        the episode at once, and the refused threads' wait was learned as the host's
        recovery)."""
        self._stated.served()
        begin = mono if sent is None else min(sent, mono)
        episode = self.episode
        if episode is not None and self._before(seq):
            episode.let_through()
            self._learner.success()
            return None
        if episode is None:
            self._since.served(begin, mono)
            self.pacer.served(begin, wall)
            self._learner.success()
            return None
        self.episode = None
        obs = episode.observation(mono - episode.start_mono)
        policy = self._ctx.policy
        turned = episode.turned(mono, policy.plausible_wait, policy.min_sleep)
        recovery = self._learner.ended(episode, obs, mono, wall, turned)
        counter = self.pacer.probes.counter
        # A refusal taken for one at random is no window start: the cycle goes on.
        at_random = recovery is Recovery.AT_RANDOM
        found = self.pacer.opening.ended(episode.served, episode.span, counter, wall, at_random)
        if at_random:
            obs = dataclasses.replace(obs, at_random=True)  # (no window start on the clock)
        window_start = recovery is Recovery.WINDOW_START
        self._since.recovered(episode, begin, mono, at_random, turned, window_start)
        # A recovery from a rate limit is a window start: the pacer's periods count from it.
        self.pacer.recovered(mono, wall, window_start, found)
        return self._add_observation(obs, wall)

    def on_stated_limit(
        self,
        info: RateLimitInfo,
        mono: float,
        wall: float,
        sent: Optional[float] = None,
        seq: Optional[int] = None,
    ) -> None:
        """Take a server's statement of its limit as evidence (never as an order), from a 2xx
        answered at ``mono`` to a request sent at ``sent`` (monotonic; ``mono`` if unknown),
        numbered ``seq`` (:meth:`number`; ``None``: unknown).

        A stated rate seeds pacing only while nothing was learned; it is always kept as the
        documented figure for reports. ``Remaining: 0`` with a short reset holds the next
        request until the reset, as the host asked, within ``max_sleep``; not for workers on
        the host's shared schedule (see ``Pacer.send_gap``), which the schedule paces: a reset
        stated in whole seconds, rounded up, would stop each for up to a second.
        """
        wire = self._wire
        others = max(0, wire.on_wire - 1)  # (this answer's request is counted until recorded)
        wait = self._stated.observe(info, mono, wall, sent, seq, others, wire.issued)
        if wait > 0 and self.pacer.send_gap() is None:
            self.gate_keeper.wait_until(mono + wait, stated=True)

    def on_rejection(
        self,
        status: int,
        parsed: ParsedRetryAfter,
        info: RateLimitInfo,
        mono: float,
        wall: float,
        attempt: int,
        seq: Optional[int] = None,
        *,
        outran: bool = False,
    ) -> Decision:
        """Record a 429/503 to a request numbered ``seq`` (:meth:`number`; ``None``:
        unknown), sent past the places the host's statements left it if ``outran``
        (:meth:`outruns`), and decide the wait (or a hold). Sets the host's shared wait.

        A refusal of a request that went before the episode under way began (another
        thread's, on the wire together with the one first refused) is no retry: it says
        only what the first refusal said, and the wait decided is the episode's, not
        doubled (counted as a retry, each of eight threads refused together doubled the
        next wait, and a host refusing at the second request of a burst seemed to refuse
        its retries too: its budget, a lower bound, was then not searched upward)."""
        tried = self._stated.trying()
        self._stated.refused(wall)
        episode = self.episode
        t = self.tuning
        if episode is not None and mono - episode.start_mono > t.stale_episode:
            self._add_observation(episode.observation(None), wall)
            episode = self.episode = None
        if episode is None:
            episode = self.episode = self._since.episode(status, parsed, mono, wall, t)
            self._wire.begin()
            _placed(episode, self.pacer, mono, wall)
            # A refusal of a request that threads sent past the places the host's
            # statements left it says only that they outran the statements, as a failed
            # try does. One the statements left a place for is a limit they do not state
            # (an hour's quota stated, a second's enforced): learned from, as any refusal.
            episode.tried = tried or outran
        elif not self._before(seq):
            episode.follow(status, parsed, mono, wall)
        decision = self._decider.decide(episode, status, parsed, info, wall, attempt)
        episode.decided(decision, parsed.seconds, mono, self.policy.min_sleep)
        self.gate_keeper.decided(decision, mono, wall)  # (the wait, and a hold)
        return decision

    def _before(self, seq: Optional[int]) -> bool:
        """Whether the request numbered ``seq`` went before the episode under way began."""
        return self.episode is not None and seq is not None and seq < self._wire.began

    def _add_observation(self, obs: Observation, wall: float) -> Optional[Decision]:
        state = self.state.with_observation(obs)
        return self.rejudge(state, wall)

    def rejudge(self, state: HostState, wall: float) -> Optional[Decision]:
        """Adopt ``state`` and re-judge its category; return a decision if it changed."""
        self.state, decision = _judged(state, wall, self.policy.window, self.host)
        self.dirty = True
        return decision


def _placed(episode: Episode, pacer: Pacer, mono: float, wall: float) -> None:
    """Where in ``pacer``'s pace the refusal that began ``episode`` came (its period, the
    places the period let through before it, whether the period counted from a recovery),
    whether it ended a probe, and whether it came in the run's opening (see
    :mod:`._opening`); but there, the retry takes the refused request's place."""
    place = pacer.position()
    if place is not None:
        episode.period, episode.period_served = place
        episode.period_from_recovery = pacer.first_from_recovery()
    episode.probe, episode.shorter = pacer.probes.refused(wall)
    episode.opening = pacer.opening.refused(mono, wall, not pacer.unpaced())
    if place is not None and not episode.opening:
        pacer.refused()


def _judged(
    state: HostState, wall: float, window: int, host: str
) -> Tuple[HostState, Optional[Decision]]:
    """``state`` with its category judged afresh at ``wall`` from its last ``window``
    observations (:func:`~requests_retryafter.categories.judge`), and the decision to
    report if the category changed."""
    before = state.category
    verdict = judge(state.observations, previous=before, window=window)
    state = state.replace(evidence=verdict.evidence, updated_at=max(state.updated_at, wall))
    if verdict.category == before:
        return state, None
    state = state.replace(category=str(verdict.category), category_changed_at=wall)
    return state, Decision(
        event=Event.CATEGORY,
        host=host,
        reason=f"category {before} -> {verdict.category}: {verdict.evidence}",
        category=verdict.category,
        code=Code.FIRST_JUDGED if before == Category.UNKNOWN else Code.CATEGORY,
    )


class _Wire:
    """The run's requests to the host, numbered in the order they go (see
    ``HostTracker.number``), and the episodes' beginnings among them; and those on the
    wire (numbered and not yet back with their answers recorded: several at once only with
    threads sharing the adapter)."""

    __slots__ = ("_order", "back", "began", "issued", "on_wire")

    def __init__(self) -> None:
        self._order = itertools.count(1)  # (``next`` on it is atomic)
        #: The number the episode under way took as it began: a request numbered before it
        #: went before it began.
        self.began = 0
        self.on_wire = 0  #: (see HostTracker.on_wire)
        self.back = False  #: whether a request came back from the host yet
        self.issued = 0  #: the latest number given

    def number(self) -> int:
        """Number a request about to go: it is on the wire until :meth:`returned`."""
        self.on_wire += 1
        self.issued = number = next(self._order)
        return number

    def returned(self) -> None:
        """A request numbered came back, its answer recorded."""
        self.on_wire -= 1
        self.back = True

    def begin(self) -> None:
        """An episode begins: requests numbered from now on went after it began."""
        self.began = next(self._order)


class _Since:
    """What the tracker counts between episodes: the cycle of successes from the last
    recovery (a window start) until the next one; the cycle since the host last turned
    (``Episode.turned``: a recovery not over at the first retry, as one at random may be),
    or the host's first success; where the last recovery from a rate limit put a window
    start (between its last refusal and the recovery, monotonic); and the last success
    outside an episode."""

    __slots__ = ("cycle", "last_success", "turn", "window_start")

    def __init__(self) -> None:
        self.cycle, self.turn = _Cycle(), _Cycle()
        self.window_start: Optional[Tuple[float, float]] = None
        self.last_success: Optional[float] = None

    def served(self, begin: float, mono: float) -> None:
        """A 2xx answered at ``mono`` to a request sent at ``begin``, outside an episode."""
        self.cycle.served(begin)
        self.turn.served(begin)
        self.last_success = mono

    def recovered(
        self,
        episode: Episode,
        begin: float,
        mono: float,
        at_random: bool,
        turned: bool,
        window_start: bool,
    ) -> None:
        """The host recovered from ``episode`` at ``mono`` with a request sent at ``begin``:
        a refusal taken for one ``at_random`` goes on with the cycle; one that ``turned``
        the host's window starts the cycle since the last turn afresh; a ``window_start``
        is kept for the next episode."""
        self.cycle.recovered(begin, goes_on=at_random)
        self.turn.recovered(begin, goes_on=not turned)
        if window_start:
            self.window_start = (episode.last_fail_mono, mono)

    def episode(
        self, status: int, parsed: ParsedRetryAfter, mono: float, wall: float, tuning: Tuning
    ) -> Episode:
        """A rejection episode begun at ``mono``/``wall``, with what the counts say of it."""
        cycle, turn = self.cycle, self.turn
        episode = Episode(status, parsed, mono, wall, cycle.count, cycle.span(mono), tuning)
        if turn.begin is not None:
            episode.turn_served, episode.turn_span = turn.count, turn.span(mono)
        episode.recovered_at = self.window_start
        if episode.recovered_at is None and self.last_success is not None:
            # Before any recovery, the last success: its window began at or before it,
            # so a round window counted from it ends no earlier than the host's (where
            # the window opened at the run's first request, later by the time the
            # requests since took; a sliding window has all its budget back only then).
            # The search may retry there (_decide._round_boundary), as after a recovery.
            episode.recovered_at = (self.last_success, self.last_success)
        return episode


class _Cycle:
    """The successes since a moment: how many, and when the first went (monotonic)."""

    __slots__ = ("begin", "count")

    def __init__(self) -> None:
        self.begin: Optional[float] = None
        self.count = 0

    def served(self, begin: float) -> None:
        """A 2xx to a request sent at ``begin``, outside an episode."""
        if self.begin is None:
            self.begin = begin
        self.count += 1

    def recovered(self, begin: float, goes_on: bool) -> None:
        """The host recovered with a request sent at ``begin``: the cycle starts afresh
        from it, or (``goes_on``) counts it and goes on."""
        if goes_on:
            self.count += 1
        else:
            self.begin, self.count = begin, 1

    def span(self, mono: float) -> float:
        """Seconds from the cycle's first request to ``mono`` (0 before any)."""
        return 0.0 if self.begin is None else mono - self.begin
