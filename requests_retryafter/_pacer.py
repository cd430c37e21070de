"""The pacer: when the next request to a host may go.

From the learned limit (a budget of requests per window, or only a rate) it paces the host:
each window's budget at the window's start, counted from a recovery, or spread evenly for a
token bucket, or evenly at ``utilization`` times a stated rate. Each period used in full
without a refusal goes to the prober (:mod:`._prober`), which decides when to pace a larger
budget instead, and whether it held.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

from . import _lattice, _schedule
from ._context import HostContext
from ._opening import Opening
from ._prober import Prober
from ._sends import PaceLog
from ._stated_trial import StatedTrial
from .state import LimitEstimate

__all__ = ["Pacer"]


class Pacer:
    """The window budget of one host and its periods (the probes for a larger one are
    :attr:`probes`').

    Args:
        ctx: the host's shared state and settings.
        trial: the trials of an even pace on a host whose statements pace it (their pace,
            while one is on trial or kept, paces the host; see :mod:`._stated_trial`).
    """

    def __init__(self, ctx: HostContext, trial: StatedTrial) -> None:
        self.ctx = ctx
        self._trial = trial
        # The budget per period, periods counted from the anchor (a recovery).
        #: Monotonic start of the period lattice (a recovery), or ``None`` before one.
        self.anchor: Optional[float] = None
        self._period = 0
        #: The length of the periods ``_period`` counts (``None``: none counted yet).
        self._length: Optional[float] = None
        self._period_count = 0
        #: The probes for a larger limit, and the search for one learned as a lower bound.
        self.probes = Prober(ctx)
        self._next_slot = 0.0
        # When the last request reserved on a lattice spread evenly was to go.
        self._last_start = float("-inf")
        # When the last requests went, and which periods that holds (see PaceLog).
        self._log = PaceLog(ctx)
        self._first = float("-inf")  # when the current period's first request went
        # The anchor a recovery from a rate limit set, while the periods count from it.
        self._recovery: Optional[float] = None
        self.opening = Opening(ctx)  #: a counter's budget at a run's start (:mod:`._opening`)
        #: Whether the place :meth:`reserve` last gave was the last of its period's budget
        #: (set by every reservation; see ``HostTracker.period_closing``).
        self.last_place = False

    # -- the pace ------------------------------------------------------------------------

    def pace_rate(self) -> Optional[float]:
        """Requests per second this adapter paces the host at, or ``None`` for no pacing."""
        ctx = self.ctx
        even = self._trial.pace()
        if even is not None:
            return even
        if not ctx.policy.pace or ctx.state.limit is None:
            return None
        return ctx.state.limit.rate * ctx.policy.utilization / max(1, ctx.share)

    def unpaced(self) -> bool:
        """Whether nothing paces a worker alone on the host: no limit learned or being
        probed, and no even pace on trial or kept (:meth:`reserve` gives 0 then)."""
        ctx = self.ctx
        return self._trial.rate is None and (
            not ctx.policy.pace or (ctx.state.limit is None and self.probes.candidate is None)
        )

    def budget(self, limit: Optional[LimitEstimate] = None) -> Optional[Tuple[int, float]]:
        """``(requests, seconds)``: this adapter's share of the learned window, if any (of
        the window being probed, while a probe is under way; of ``limit`` if given)."""
        ctx = self.ctx
        limit = limit or self.probes.candidate or ctx.state.limit
        if not ctx.policy.pace or limit is None or not limit.burst or not limit.window:
            return None
        share = max(1, ctx.share)
        if limit.burst < share:
            # Fewer requests than workers: each sends one every few windows, so that together
            # they stay within the budget (one each per window would be ``share``).
            return 1, limit.window * math.ceil(share / limit.burst)
        # Split the window between the workers; the first ``burst % share`` take one more.
        extra = 1 if ctx.rank < limit.burst % share else 0
        return limit.burst // share + extra, limit.window

    def send_gap(self) -> Optional[Tuple[float, float]]:
        """``(gap, window)`` of the host's shared schedule, for workers sharing a host (see
        :func:`._schedule.send_gap`), else ``None``."""
        return _schedule.send_gap(self.ctx)

    def depth(self) -> float:
        """How deep the host's bucket can be: see :func:`_depth`."""
        return _depth(self.ctx, self.probes.bucket_depth)

    def spread(self) -> bool:
        """Whether the host is paced evenly, as a token bucket (see ``LimitEstimate.even``);
        otherwise each window's budget goes at the window's start."""
        return self.probes.even()

    def reserve(self, mono: float, wall: float, refusing: bool) -> float:
        """Reserve the next request's place; return seconds to wait for it (0: go now).

        With a learned window, up to ``burst`` requests go at once at the start of each
        window (counted from the last recovery, which is a window start); the next waits for
        the following window. With only a stated rate, requests are spaced evenly, unless the
        host states what remains of its window and when it resets: those statements pace it
        then (:mod:`._stated`), and pace alone workers that share the host's windows of
        ``Tuning.spread_below`` or longer (shorter ones go on their shared schedule, see
        :meth:`send_gap`). ``refusing``: the host is in a rejection episode (no probe starts
        then).
        """
        self.last_place = False
        if self.send_gap() is not None:
            return 0.0  # workers on the host's shared schedule: the schedule paces
        if self.ctx.counted and self.ctx.share > 1:
            # Workers sharing a host that counts every request, of every worker, and says
            # what remains: its statements pace them. A budget one of them learned is its
            # own view of the host: four workers on one limiter of 20 a second learned 4 a
            # second (their share of the first window), and paced the host at half its
            # limit. (A worker alone is paced as before, by the statements and its budget:
            # all the host counts of the run is its own, so its budget is the host's.)
            return 0.0
        even = self._trial.reserve(mono)
        if even is not None:
            return min(even, self.ctx.policy.max_hold)  # an even pace tried, or kept
        budget = self.budget()
        if budget is None:
            rate = self.pace_rate()
            if rate is None or rate <= 0 or self.ctx.counted:
                return 0.0
            slot = max(mono, self._next_slot)
            self._next_slot = slot + 1.0 / rate
            return min(slot - mono, self.ctx.policy.max_hold)
        allowed, period = budget
        spread = self.spread()
        resume = self.opening.take(
            mono, wall, budget, spread and not refusing, not spread and not refusing
        )
        if resume is not None:  # in the run's opening: now, and the even pace from ``resume``
            self.anchor, self._period, self._period_count = resume, 0, 0
            self._log.moved = False
            self._last_start = resume - period / allowed
            return 0.0
        if self.anchor is None:
            # Keep in step with the windows a previous run or worker saw start, if any.
            self.anchor, self._period, self._period_count = _in_step(self.ctx, mono, wall), 0, 0
            self._log.started(self.anchor + period)
        self._count_in(period)
        current = int((mono - self.anchor) // period)
        spent = self._period > 0 or self._period_count >= allowed
        if self._recovery is None and self.opening.trying(mono, current == 0, spent):
            # A try of the turn of the run's first window, its budget spent (see _opening;
            # other calls may have taken places in the next window meanwhile).
            return 0.0
        early = self.probes.held(mono, self.depth)  # (spread evenly only)
        if early or self._period < current or self._period_count >= allowed:
            self._close_period(allowed, mono, wall, refusing, early)
            # A probe of a shorter window starts its lattice at the closed period's start.
            before, (allowed, period) = (allowed, period), self.budget() or budget
            self._count_in(period)
            if self.spread() and (allowed, period) != before:
                # Spread evenly, a new pace starts a gap after the last request, not at the
                # next period's start: a bucket has no periods.
                self.anchor = max(mono, self._last_start + period / allowed)
                self._period, self._period_count = 0, 0
                self.probes.paced_from(self.anchor)
            elif not (early and self.spread()):
                # (A probe spread evenly kept early at the pace it went goes on in its
                # period: moved to the next, a client slower than the probe waited for it.)
                current = int((mono - self.anchor) // period)
                self._period, self._period_count = max(current, self._period + 1), 0
        place = self._period_count
        self._period_count += 1
        self.last_place = self._period_count >= allowed
        start = self.anchor + self._period * period
        if start > mono:
            start += _margin(self.ctx)  # waiting for a window's start
        if self.spread():
            # A gap after the last send too: a client back from a pause would otherwise send
            # at once every place of the period whose time had passed (a bucket without a
            # burst refuses the second of two requests that come together).
            gap = period / allowed
            start = max(start + place * gap, self._last_start + gap)
            self._last_start = max(start, mono)  # when this one goes
            self.probes.sent(start > mono)
        else:
            if place == 0:
                self._log.begin(max(start, mono), self.anchor + self._period * period)
            if self._log.logging:  # (see PaceLog)
                probing = self.probes.candidate is not None
                learned = self.budget(self.ctx.state.limit) if probing else None
                start, moved = self._log.take(place, start, mono, allowed, period, learned)
                if moved:  # the period starts later, and the lattice moves with it
                    self.anchor = start - self._period * period
            if place == 0:
                self._first = max(start, mono)  # (see _whole)
        # A wait longer than max_sleep becomes a hold, and no hold outlasts max_hold.
        return min(max(0.0, start - mono), self.ctx.policy.max_hold)

    def _count_in(self, period: float) -> None:
        """Count the periods in ``period``-long ones from here on (see :func:`_renumbered`)."""
        self._period = _renumbered(self._period, self._length, period)
        self._length = period

    def next_start(self, mono: float) -> Optional[float]:
        """When the learned window's next period after ``mono`` starts (a margin after it,
        see :func:`_margin`), or ``None`` without a window budget or an anchor."""
        budget = self.budget()
        if budget is None or self.anchor is None:
            return None
        window = budget[1]
        return self.anchor + (int((mono - self.anchor) // window) + 1) * window + _margin(self.ctx)

    def served(self, sent: float, wall: float) -> None:
        """A request sent at ``sent`` (monotonic) got through outside an episode (answered
        at ``wall``): the run's opening hears of it (see :mod:`._opening`). Where it was
        the try of the run's first window's turn right after its budget, the window turned
        during the burst: the pacer's log (see :class:`~._sends.PaceLog`) holds it as the
        latest, so that the next window holds no more than the budget with it. (Taken for
        the first of the next window's budget, as a place reserved for it in turn, each
        later period's first request went as late into it as the try had, and a client
        sending in turn waited for it: a host with no limit, its budget stored under what a
        burst got through, went at a third of its pace.)"""
        if self.opening.served(sent, wall):
            self._log.served(sent, self.budget)  # (asked only then: on every success's path)

    def release(self, mono: float) -> None:
        """Give back the last reserved place (the call stopped before using it)."""
        if self._trial.release(mono):
            return
        if self.budget() is not None:
            self._give_back()
            return
        rate = self.pace_rate()
        if rate:
            self._next_slot = max(mono, self._next_slot - 1.0 / rate)

    # -- what the host did -----------------------------------------------------------------

    def position(self) -> Optional[Tuple[int, int]]:
        """The period the last reserved request went in and how many its period let through
        before it, when paced by a window (``None`` otherwise)."""
        if self.budget() is not None and self.anchor is not None:
            return self._period, max(0, self._period_count - 1)
        return None

    def refused(self) -> None:
        """The request last reserved (see :meth:`position`) began a rejection episode: when
        paced by a window's budget, its place goes back to its period, for its retry. A
        host that refused it did not count it (the retry of a refusal at random, at a
        budget's last place, waited a whole window for a place, and its recovery then read
        as a sliding window counter's); a recovery that is a window start counts afresh
        anyway."""
        if not self.spread() and self.budget() is not None:
            self._give_back()

    def _give_back(self) -> None:
        """The last reserved place of a window's budget is free again."""
        self._period_count = max(0, self._period_count - 1)
        self._log.sends.release()

    def first_from_recovery(self) -> bool:
        """Whether the last reserved request went in the first period counted from a
        recovery from a rate limit (:meth:`recovered`), no lattice located on the clock."""
        limit = self.ctx.state.limit
        return (
            self._period == 0
            and self._recovery is not None
            and self.anchor == self._recovery
            and (limit is None or limit.anchor is None)
        )

    def _close_period(
        self, allowed: int, mono: float, wall: float, refusing: bool, early: bool = False
    ) -> None:
        """A period ends: if its budget was used without a rejection (or, ``early``, a
        doubling probe spread evenly held before its end), a probe may hold or start. A
        probe of a window of another length counts its periods from the start of the
        period just used (counted from the old anchor, they would start earlier)."""
        if self._period_count < allowed and not early:
            return
        if not self.probes.closed(mono, wall, refusing, self.depth, early, self._whole(mono)):
            return
        limit = self.ctx.state.limit  # the one the probe started from
        if limit is not None and limit.window:
            anchor = mono if self.anchor is None else self.anchor
            self.anchor = anchor + self._period * limit.window
            self._period = 0

    def _whole(self, mono: float) -> bool:
        """Whether the period closing at ``mono`` was used from its start: its first
        request went no later into it than the narrowing's precision
        (``Tuning.search_gap``) of its length."""
        length = self._length or 0.0
        start = (mono if self.anchor is None else self.anchor) + self._period * length
        return self._first - start <= (self.ctx.tuning.search_gap - 1.0) * length

    def recovered(self, mono: float, wall: float, rate_limited: bool, turn: bool = False) -> None:
        """The host answered 2xx after an episode: a recovery from a rate limit is a window
        start, so the periods count from it (in step with the host's windows where located);
        the end of a maintenance or a hold is not, unless nothing anchored them yet.
        ``turn``: it found the turn of the run's first window (see :mod:`._opening`); the
        places other calls took meanwhile, for the window after the first request, go in
        the window it began, and count there. A refusal taken for one at random (see
        LimitLearner) is no window start (not ``rate_limited``): the periods go on, the
        refused request's place having gone to its retry (:meth:`refused`)."""
        self._last_start = max(self._last_start, mono)  # (the recovery went just now)
        if rate_limited or self.anchor is None:
            taken = self._period_count if turn and self._period == 1 else 0
            # The host let a request through again: its windows start from here, whatever
            # went before (in the phase the log moved them to, see PaceLog.recovered).
            snap = _in_step(self.ctx, mono, wall)
            self.anchor = self._log.recovered(mono, snap, self.anchor, self.budget())
            self._period = 0
            self._period_count = 1 + taken
            self._recovery = self.anchor if rate_limited else None


def _renumbered(number: int, length: Optional[float], period: float) -> int:
    """The number, in ``period``-long periods, of the period numbered ``number`` in
    ``length``-long ones (``None``: none counted yet). The budget's window can change under
    the pacer's lattice (a limit another worker learned, merged in from the store, or a
    probe of another length that starts or ends): the period in use is then renumbered as
    the first of the new length that starts no earlier than it did, from the same anchor (a
    recovery, or a window start located on the clock), and keeps its count. (Its number in
    the old length read in the new one put the next request whole windows away: workers
    that merged a 5 s window in while counting 1 s ones waited 20 s and more, and four of
    them sent 1 to 5 a second to nginx's 10.)"""
    if length is None or length == period:
        return number
    # (less a hair: a period whose start falls on the new lattice keeps its place)
    return math.ceil(number * length / period - 1e-9)


def _depth(ctx: HostContext, shown: Optional[float]) -> float:
    """How deep the host's bucket can be: how much excess rate it absorbs before it
    refuses.

    A host that showed itself a token bucket in this run is no deeper than the burst it
    let through at once then (``shown``, ``Prober.bucket_depth``: one more at once was
    refused), whatever it served since at an even pace (at 8 a second, a bucket one request
    deep serves 8 a window too). Otherwise, the deepest burst the host let through within one
    learned window (at least the learned budget; of a budget learned among other
    workers, ``LimitEstimate.shares``, the worker's own take: the rest is a guess): of
    the requests a host let through over a longer span than the window, some window of
    that span held at least their average per window: so each observation counts what
    it served, scaled down to one window where its span was longer (an observation 5 ms
    longer than the window is not to count for nothing)."""
    limit = ctx.state.limit
    if limit is None or not limit.window:
        return 1.0
    if limit.even and shown is not None:
        return max(1.0, shown)
    window = limit.window
    bursts = [
        o.served * min(1.0, window / o.span) if o.span > 0 else float(o.served)
        for o in ctx.state.observations
    ]
    return float(max([*bursts, (limit.burst or 0) / limit.shares, 1]))


def _margin(ctx: HostContext) -> float:
    """Seconds after a period's start a request that waits for it goes:
    ``Tuning.located_margin`` on windows located on the clock (sent at the very moment a
    window starts, a request a hair early is refused), none on windows counted from a
    recovery (which follows the window's start)."""
    limit = ctx.state.limit
    return ctx.tuning.located_margin if limit is not None and limit.anchor else 0.0


def _in_step(ctx: HostContext, mono: float, wall: float) -> float:
    """The pacer's anchor at ``mono``: the start of the learned lattice's current window
    when a window start was located (``LimitEstimate.anchor``), else ``mono`` itself."""
    limit = ctx.state.limit
    if limit is None or limit.anchor is None or not limit.window:
        return mono
    return mono - _lattice.into(wall, limit.anchor, limit.window)
