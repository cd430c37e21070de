"""The pacer: when the next request to a host may go, and when to probe for a larger limit.

From the learned limit (a budget of requests per window, or only a rate) it paces the host:
each window's budget at the window's start, counted from a recovery, or spread evenly for a
token bucket, or evenly at ``utilization`` times a stated rate. It counts the periods used in
full without a refusal, and after enough of them probes a larger budget; a budget learned as a
lower bound is searched for (doubling, then geometric bisection between the budget that holds
and the smallest refused).
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

from . import _lattice
from ._context import ENGINE_LOG, HostContext, replace_limit
from .state import LimitEstimate

__all__ = ["Pacer"]


class Pacer:
    """The window budget of one host, its periods, and the probes and search for its limit.

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        # The budget per period, periods counted from the anchor (a recovery).
        #: Monotonic start of the period lattice (a recovery), or ``None`` before one.
        self.anchor: Optional[float] = None
        self._period = 0
        self._period_count = 0
        self._full_periods = 0
        self._probe_after = ctx.tuning.probe_after_periods
        self._probing = False
        self._probes = 0
        self._last_probe = float("-inf")
        self._probe_gains = 0
        # The search for a limit learned as a lower bound: whether it is one, and the
        # smallest budget (of the same window) refused since.
        self._lower = False
        self._ceiling: Optional[int] = None
        # A larger limit being tried; it replaces the learned one after a clean, full period.
        self._candidate: Optional[LimitEstimate] = None
        self._candidate_periods = 0
        self._next_slot = 0.0
        # When each place of the budget was last used (see _reuse), and what the last
        # reservation replaced there (for release()).
        self._uses: List[float] = []
        self._replaced: Optional[Tuple[int, float]] = None

    # -- the pace ------------------------------------------------------------------------

    def pace_rate(self) -> Optional[float]:
        """Requests per second this adapter paces the host at, or ``None`` for no pacing."""
        ctx = self.ctx
        if not ctx.policy.pace or ctx.state.limit is None:
            return None
        return ctx.state.limit.rate * ctx.policy.utilization / max(1, ctx.share)

    def budget(self, limit: Optional[LimitEstimate] = None) -> Optional[Tuple[int, float]]:
        """``(requests, seconds)``: this adapter's share of the learned window, if any (of
        the window being probed, while a probe is under way; of ``limit`` if given)."""
        ctx = self.ctx
        limit = limit or self._candidate or ctx.state.limit
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
        """``(gap, window)`` of the host's shared schedule, for workers sharing a host with a
        learned budget: consecutive sends of all of them at least ``gap`` apart (one over the
        shared search's rate, or the window over the host's whole budget before the search
        starts), so that together they send as one client spaced evenly would. ``None`` for
        one worker alone, a host with no learned budget, or windows whose budget the workers
        split (each share a burst of its own, see :meth:`budget`)."""
        ctx = self.ctx
        if ctx.share < 2 or not ctx.policy.pace:
            return None
        limit, search = ctx.state.limit, ctx.state.search
        if (
            limit is not None
            and not limit.even
            and (limit.anchor is not None or (limit.burst or 0) > ctx.share)
        ):
            # Windows: each worker sends its share at each window's start (see budget()),
            # which is exact where the windows were located on the clock, and safe where
            # each share is a burst of its own. A budget no larger than the number of
            # workers gives each one request now and then, at moments of its own that come
            # together at random: such a host, and a token bucket, are paced on the schedule.
            return None
        if search is not None:
            # Once the workers search together, the search sets the pace (whatever limit a
            # worker learned meanwhile from its own answers, which queueing distorts).
            return 1.0 / search.rate, limit.window if limit is not None and limit.window else 1.0
        if limit is None or not limit.burst or not limit.window:
            return None
        return limit.window / limit.burst, limit.window

    def depth(self) -> float:
        """The deepest burst the host let through within one learned window (at least the
        learned budget): how much excess rate a bucket absorbs before it refuses.

        Of the requests a host let through over a longer span than the window, some window
        of that span held at least their average per window: so each observation counts
        what it served, scaled down to one window where its span was longer (an
        observation 5 ms longer than the window is not to count for nothing)."""
        limit = self.ctx.state.limit
        if limit is None or not limit.window:
            return 1.0
        window = limit.window
        bursts = [
            o.served * min(1.0, window / o.span) if o.span > 0 else float(o.served)
            for o in self.ctx.state.observations
        ]
        return float(max([*bursts, limit.burst or 0, 1]))

    def spread(self) -> bool:
        """Whether the host is paced evenly, as a token bucket (see ``LimitEstimate.even``);
        otherwise each window's budget goes at the window's start."""
        limit = self._candidate or self.ctx.state.limit
        return limit is not None and limit.even

    def reserve(self, mono: float, wall: float, counted: bool, refusing: bool) -> float:
        """Reserve the next request's place; return seconds to wait for it (0: go now).

        With a learned window, up to ``burst`` requests go at once at the start of each
        window (counted from the last recovery, which is a window start); the next waits for
        the following window. With only a stated rate, requests are spaced evenly, unless the
        host states what remains of its window (``counted``: those statements pace it).
        ``refusing``: the host is in a rejection episode (no probe starts then).
        """
        if self.send_gap() is not None:
            return 0.0  # workers on the host's shared schedule: the schedule paces
        budget = self.budget()
        if budget is None:
            rate = self.pace_rate()
            if rate is None or rate <= 0 or counted:
                return 0.0
            slot = max(mono, self._next_slot)
            self._next_slot = slot + 1.0 / rate
            return min(slot - mono, self.ctx.policy.max_hold)
        allowed, period = budget
        if self.anchor is None:
            # Keep in step with the windows a previous run or worker saw start, if any.
            self.anchor, self._period, self._period_count = self.in_step(mono, wall), 0, 0
            self._uses = []
        current = int((mono - self.anchor) // period)
        if self._period < current or self._period_count >= allowed:
            self._close_period(allowed, mono, wall, refusing)
            # A probe of a shorter window starts its lattice at the closed period's start.
            allowed, period = self.budget() or budget
            current = int((mono - self.anchor) // period)
            self._period, self._period_count = max(current, self._period + 1), 0
        place = self._period_count
        self._period_count += 1
        start = self.anchor + self._period * period
        if start > mono:
            start += self.margin()  # waiting for a window's start
        if self.spread():
            start += place * period / allowed
        else:
            start = self._reuse(place, start, period, mono)
        # A wait longer than max_sleep becomes a hold, and no hold outlasts max_hold.
        return min(max(0.0, start - mono), self.ctx.policy.max_hold)

    def _reuse(self, place: int, start: float, period: float, mono: float) -> float:
        """When ``place`` of a window's budget may go (at ``start`` by the lattice), and note
        its use.

        Windows not located on the clock may be sliding ones (a log of the last window's
        requests, as the ``limits`` library's moving window keeps): such a host lets a place
        be used again only a whole window after its last use, as it reached the host. So a
        place goes no sooner than a window after its last use, plus ``Tuning.reuse_margin``
        (two requests' latencies differ, and a sleep overshoots by a varying hair). A fixed
        window is as happy with that (a window's span never holds more than the budget); it
        costs the margin once a window, and the lateness of a place that went late in its
        period (the requests before it were slower, or the client idle at the period's
        start) once. Windows located on the clock are fixed: their lattice alone paces
        them."""
        uses = self._uses
        while len(uses) <= place:
            uses.append(float("-inf"))
        limit = self.ctx.state.limit
        if limit is None or limit.anchor is None:
            start = max(start, uses[place] + period + self.ctx.tuning.reuse_margin)
        self._replaced = (place, uses[place])
        uses[place] = max(start, mono)
        return start

    def next_start(self, mono: float) -> Optional[float]:
        """When the learned window's next period after ``mono`` starts (a margin after it,
        see :meth:`margin`), or ``None`` without a window budget or an anchor."""
        budget = self.budget()
        if budget is None or self.anchor is None:
            return None
        window = budget[1]
        return self.anchor + (int((mono - self.anchor) // window) + 1) * window + self.margin()

    def margin(self) -> float:
        """Seconds after a period's start a request that waits for it goes:
        ``Tuning.located_margin`` on windows located on the clock (sent at the very moment a
        window starts, a request a hair early is refused), none on windows counted from a
        recovery (which follows the window's start)."""
        limit = self.ctx.state.limit
        return self.ctx.tuning.located_margin if limit is not None and limit.anchor else 0.0

    def in_step(self, mono: float, wall: float) -> float:
        """The pacer's anchor at ``mono``: the start of the learned lattice's current window
        when a window start was located (``LimitEstimate.anchor``), else ``mono`` itself."""
        limit = self.ctx.state.limit
        if limit is None or limit.anchor is None or not limit.window:
            return mono
        return mono - _lattice.into(wall, limit.anchor, limit.window)

    def release(self, mono: float) -> None:
        """Give back the last reserved place (the call stopped before using it)."""
        if self.budget() is not None:
            self._period_count = max(0, self._period_count - 1)
            if self._replaced is not None and self._replaced[0] < len(self._uses):
                self._uses[self._replaced[0]] = self._replaced[1]
            self._replaced = None
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

    def refused(self, wall: float) -> Tuple[bool, Optional[float]]:
        """A rejection episode began at ``wall``: a probe under way is over (refused; spaced
        further apart unless searching). A probe at the learned window's length bounds the
        budget's search from above; a probe of a shorter window shows the host's window
        longer than it (``LimitEstimate.shortest``). Returns whether a probe was under way,
        and the window probed if it was a shorter one."""
        t = self.ctx.tuning
        if self._probing and not self.searching() and not self.narrowing():
            self._probe_after = min(t.probe_max_periods, self._probe_after * 2)
        limit, candidate = self.ctx.state.limit, self._candidate
        shorter = self._shorter(candidate)
        if shorter is not None and limit is not None:
            shortest = max(limit.shortest or 0.0, shorter)
            self.ctx.set_limit(replace_limit(limit, shortest=shortest), wall)
        elif (
            candidate is not None
            and candidate.burst
            and limit is not None
            and candidate.window == limit.window
        ):
            self._ceiling = min(self._ceiling or candidate.burst, candidate.burst)
        self._candidate = None
        self._probe_gains = 0
        self._probing = False
        self._full_periods = 0
        return candidate is not None, shorter

    def _shorter(self, candidate: Optional[LimitEstimate]) -> Optional[float]:
        """The window of ``candidate`` if it is shorter than the learned one, else ``None``."""
        limit = self.ctx.state.limit
        if candidate is None or candidate.window is None or limit is None or not limit.window:
            return None
        return candidate.window if candidate.window < limit.window else None

    def recovered(self, mono: float, wall: float, rate_limited: bool) -> None:
        """The host answered 2xx after an episode: a recovery from a rate limit is a window
        start, so the periods count from it (in step with the host's windows where located);
        the end of a maintenance or a hold is not, unless nothing anchored them yet."""
        if rate_limited or self.anchor is None:
            self.anchor, self._period, self._period_count = self.in_step(mono, wall), 0, 1
            # The host let a request through again: its windows start from here, whatever
            # went before.
            self._uses, self._replaced = [], None

    def lower_bound(self, lower: bool) -> None:
        """A limit was learned afresh: whether it is a lower bound, to be searched upward
        (the search starts with no budget refused)."""
        self._lower = lower
        self._ceiling = None

    def reprobe_soon(self) -> None:
        """The learned limit turned out a token bucket: its probe was refused for its shape,
        not its rate. The budget that passed at a window's start was the bucket's depth, and
        the bucket refills at least that much a window: its rate is a lower bound, searched
        upward from there (doubling, with no budget refused yet)."""
        self.lower_bound(True)
        self._probe_after, self._last_probe = self.ctx.tuning.probe_after_periods, float("-inf")

    # -- probes ----------------------------------------------------------------------------

    def _probe_hold(self) -> float:
        """Seconds an evenly spaced probe must hold: at least ``spread_probe_hold``, and long
        enough for its excess rate to empty the bucket (as deep as the largest burst the host
        let through within one window)."""
        candidate, limit = self._candidate, self.ctx.state.limit
        t = self.ctx.tuning
        if candidate is None or limit is None or not limit.window:
            return t.spread_probe_hold
        excess = candidate.rate - limit.rate
        depth = self.depth()
        # Searching up from a lower bound, one period suffices beside the bucket's emptying:
        # a probe far past the limit is refused within it, and one a little past it is
        # corrected by the multiplicative decrease of a later refusal.
        least = limit.window if self.searching() else t.spread_probe_hold
        if excess <= 0 or not depth:
            return least
        return max(least, min(depth / excess, t.probe_hold_max))

    def _close_period(self, allowed: int, mono: float, wall: float, refusing: bool) -> None:
        """A period ends: count it if its budget was used without a rejection, and probe up."""
        if self._period_count < allowed:
            return
        ctx = self.ctx
        if self._candidate is not None:
            # A whole period at the probed limit went without a rejection: it holds. (Spread
            # evenly, it must hold long enough to empty a bucket as deep as the deepest burst
            # seen: a bucket absorbs an excess rate until it is empty.)
            # A shorter window must hold for ``narrow_periods`` periods in a row: see Tuning.
            self._candidate_periods += 1
            window = self._candidate.window or 1.0
            if self.spread() and self._candidate_periods * window < self._probe_hold():
                return
            shorter = self._shorter(self._candidate) is not None
            if shorter and self._candidate_periods < ctx.tuning.narrow_periods:
                return
            candidate, self._candidate = self._candidate, None
            ctx.set_limit(replace_limit(candidate, updated_at=wall), wall)
            self._probe_gains += 1
            self._probing = False
            if self._ceiling is not None and candidate.burst and candidate.burst >= self._ceiling:
                # The host allows now what it refused before: the search is over, and only
                # the slow re-probes go on.
                self._ceiling, self._lower = None, False
            if not (shorter and self.narrowing()):
                return
            # Narrowing goes on at once: the periods that held were the next probe's.
        self._full_periods += 1
        limit = ctx.state.limit
        narrowing = self.narrowing() and not self.searching()  # one search at a time
        searching = self.searching() or narrowing
        # Workers sharing a host probe in turn, not all at once; and short windows are probed
        # no more often than long ones would be (probe_min_seconds, doubling likewise).
        t = ctx.tuning
        spacing = t.probe_min_seconds * self._probe_after / t.probe_after_periods
        if (
            limit is None
            or limit.burst is None
            or refusing  # no probe while the host still refuses
            or (searching and self._full_periods < max(1, ctx.share))  # in turn, shared
            or (
                not searching
                and (
                    self._full_periods < self._probe_after * max(1, ctx.share)
                    or mono - self._last_probe < spacing * max(1, ctx.share)
                )
            )
        ):
            return
        self._full_periods = 0
        self._last_probe = mono
        self._probing = True
        self._probes += 1
        window = limit.window or 1.0
        if narrowing and limit.shortest:
            # The window was measured between a refusal and a recovery found later: probe
            # the geometric middle of what the evidence allows.
            window = max(ctx.policy.min_sleep, math.sqrt(limit.shortest * window))
            burst = limit.burst
        elif searching:
            ceiling = self._ceiling
            burst = limit.burst * 2 if ceiling is None else _between(limit.burst, ceiling)
        elif (
            self._probes % 2
            and limit.anchor is None
            and window not in t.round_periods
            and not self.spread()
            and window > ctx.policy.min_sleep
        ):
            # The window was measured through probing (an upper bound; not one snapped to a
            # lattice, which is exact): try a shorter one.
            window = max(ctx.policy.min_sleep, window * (1 - t.probe_step))
            burst = limit.burst
        else:
            # Like TCP's slow start: each probe that held doubles the next step.
            step = min(t.probe_max_step, t.probe_step * 2.0**self._probe_gains)
            burst = limit.burst + max(1, round(limit.burst * step))
        if limit.window is not None and window != limit.window:
            # A window of another length: its periods count from the start of the period
            # just used (counted from the old anchor, they would start periods earlier).
            anchor = mono if self.anchor is None else self.anchor
            self.anchor = anchor + self._period * limit.window
            self._period = 0
        self._candidate = replace_limit(limit, burst=burst, window=window, rate=burst / window)
        self._candidate_periods = 0
        ENGINE_LOG.debug("%s: probing %d per %.3g s", ctx.host, burst, window)

    def narrowing(self) -> bool:
        """Whether the learned window is still being narrowed down: it was measured between
        a refusal and a later recovery (``LimitEstimate.shortest``), and the two are more
        than ``Tuning.search_gap`` apart. Only for a worker alone pacing windows whose
        starts were not located on the clock (those are exact), and not below the floor: a
        refused probe costs at least ``min_sleep``."""
        limit = self.ctx.state.limit
        return (
            limit is not None
            and self.ctx.policy.pace
            and self.ctx.share <= 1
            and not limit.even
            and limit.anchor is None
            and bool(limit.burst)
            and limit.window is not None
            and limit.shortest is not None
            and limit.window
            > self.ctx.tuning.search_gap * max(limit.shortest, self.ctx.policy.min_sleep)
        )

    def searching(self) -> bool:
        """Whether the limit is still being searched for (see ``Tuning.search_gap``)."""
        limit = self.ctx.state.limit
        if not self._lower or limit is None or not limit.burst:
            return False
        if self._ceiling is None:
            return True
        return self._ceiling > max(self.ctx.tuning.search_gap * limit.burst, limit.burst + 1)


def _between(low: int, high: int) -> int:
    """The geometric middle of two budgets, at least one more than ``low``."""
    return max(low + 1, round(math.sqrt(low * high)))
