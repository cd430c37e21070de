"""The prober: when to try a larger limit than the learned one, and whether it held.

After enough periods used in full without a refusal, the pacer (:mod:`._pacer`) paces a
probe: one step more than the learned budget (spread evenly, where one request more was
refused and is coarser than the search's precision, the middle, in a window twice as long),
or, for a budget learned as a lower bound, a search (doubling, then geometric bisection
between the budget that holds and the smallest refused, ``Tuning.search_gap``), or, for a
window measured between a refusal and a later recovery, the geometric middle of the two
(``LimitEstimate.shortest``). A probe that holds its periods (and, spread evenly, long enough
to empty the bucket, or to fill a sliding window counter's headroom) becomes the learned
limit; a refused one ends, and the next comes later unless a search or a narrowing goes on.
Spread evenly, a search's next probe follows at once, and for a worker alone so does a step's
after one that held, the step doubling (TCP's slow start).
A probe spread evenly refused sooner than it could have emptied a full bucket shows that the
rate it started from, where the probe before it raised that rate, was draining it: that
refusal is not the probe's. Spread evenly, the rate a kept probe raised stays on trial until
the next probe: a refusal of it is the probe's (back to the rate before it), not a cut. A
probe spread evenly refused after it went long enough keeps the part of its gain it showed
(:func:`_part`). A doubling probe the client does not reach holds at the client's own pace
(:meth:`Prober.sent`). Spread evenly, the rate before a cut (``LimitEstimate.peak``) is probed
again once the cut pace held ``Tuning.spread_probe_hold`` (:func:`_back`). A host shown a
sliding window counter is probed at the next period's end (:meth:`Prober.reprobe_soon`).
A step up spread evenly under way when the adapter closes is kept on trial, for the next run
to start from (:func:`carry`).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

from ._context import ENGINE_LOG, HostContext, kept_share, replace_limit
from .state import LimitEstimate
from .tuning import Tuning

__all__ = ["Prober", "carry"]


class Prober:
    """The probes and the search for one host's limit.

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._full_periods = self._probes = self._probe_gains = 0
        self._probe_after = ctx.tuning.probe_after_periods
        self._last_probe = self._refused_wall = float("-inf")  # (the latter epoch: _back)
        # Whether a probe is under way; whether it is one of a search or a narrowing (its
        # gain is the search's, not a step's: see _start); one back to the rate before a cut
        # (LimitEstimate.peak); one from a rate the probe before it raised, still on trial
        # (LimitEstimate.held; see _drained); and whether the next is due at the next period
        # used in full, a refusal meanwhile or not (see closed and reprobe_soon).
        self._probing = self._searched = self._back = self._raised = self._climb = False
        # The search for a limit learned as a lower bound: whether it is one; and the
        # smallest budget (of the learned window) refused since, searching or not.
        self._lower = False
        self._ceiling: Optional[int] = None
        #: A larger limit being tried; it replaces the learned one after its periods held.
        self.candidate: Optional[LimitEstimate] = None
        self._candidate_periods = 0
        self._candidate_wall = float("-inf")
        # When the probe's pace began (monotonic; see paced_from), and how many of its
        # requests waited for their place (see sent).
        self._candidate_mono = float("-inf")
        self._waits = self._sent = 0
        #: The burst a host let through at once when it showed itself a token bucket in this
        #: run (one more at once was refused): the bucket is no deeper. ``None``: not shown.
        self.bucket_depth: Optional[float] = None
        #: Whether the host showed itself a sliding window counter in this run (see
        #: LimitLearner), and nothing since showed it a bucket or learned its window
        #: afresh: its probes fill its headroom, not a bucket's depth (see :func:`_hold`).
        self.counter = False

    def even(self) -> bool:
        """Whether the limit paced (the probe, while one is under way) is spread evenly."""
        limit = self.candidate or self.ctx.state.limit
        return limit is not None and limit.even

    # -- what the host did -----------------------------------------------------------------

    def refused(self, wall: float) -> Tuple[bool, Optional[float]]:
        """A rejection episode began at ``wall``: a probe under way is over (refused; spaced
        further apart unless searching). A probe at the learned window's length bounds the
        budget's search from above; a probe of a shorter window shows the host's window
        longer than it (``LimitEstimate.shortest``). Spread evenly, a refusal of the rate
        the last kept probe raised, before any other probe (in this run or, stored as
        ``LimitEstimate.held``, the next), is that probe's: the limit goes back to the one
        before it (see :meth:`closed`). Returns whether a probe was under way, and the
        window probed if it was a shorter one."""
        kept = None if self.candidate is not None else _trial_refused(self.ctx, wall)
        if kept is not None:
            self.candidate, self._probing = kept, True
        _forget(self.ctx, "held")  # the rate on trial is no longer
        self._refused_wall = wall
        searched = self.searching()
        limit, candidate = self.ctx.state.limit, self.candidate
        part = None
        if self.even() and not self.counter:
            since, depth = self._candidate_wall, self.bucket_depth or 1.0
            part = _part(candidate, limit, self._sent, since, wall, depth)
        if self._probing and part is None and limit is not None and limit.peak is not None:
            # A probe up to the rate before a cut, or back to it, refused too soon for
            # chance: that rate was over the host's.
            limit = _forget(self.ctx, "peak")
        if (
            self._probing
            and not (searched or self._back)
            and part is None
            and not _narrowing(self.ctx)
        ):
            self._space_out()
        shorter = _shorter(self.ctx.state.limit, candidate)
        drained = (
            self._raised
            and self.even()
            and _drained(candidate, limit, self.bucket_depth, self._candidate_wall, wall)
        )
        if drained and limit is not None and limit.burst:
            # Refused sooner than the probe could have emptied a full bucket: the bucket
            # was not full, so the rate the probe started from was not the host's either.
            self._ceiling = min(self._ceiling or limit.burst, limit.burst)
            candidate = None
        elif shorter is not None and limit is not None:
            shortest = max(limit.shortest or 0.0, shorter)
            self.ctx.set_limit(replace_limit(limit, shortest=shortest), wall)
        elif (
            candidate is not None
            and candidate.burst
            and limit is not None
            and candidate.window == limit.window
        ):
            self._ceiling = min(self._ceiling or candidate.burst, candidate.burst)
            self._ended(searched)
        if part is not None and not drained:
            self.ctx.set_limit(part, wall)
        self.candidate = None
        self._probe_gains = 0
        self._probing = self._back = False
        self._full_periods = 0
        return candidate is not None, shorter

    def _ended(self, searched: bool) -> None:
        """If the search was under way (``searched``) and is over now, bounded by a budget
        it saw refused (a probe at it was refused, or the one below it held): that refusal
        was a refused probe, whose spacing waited for the search to end. The next re-probe,
        one step up, would ask for that budget again: it waits as one after a refused probe
        does."""
        if searched and self._ceiling is not None and not self.searching():
            self._space_out()

    def _space_out(self) -> None:
        """A probe was refused: the next waits twice as many periods (and seconds), up to
        ``Tuning.probe_max_periods``."""
        self._probe_after = min(self.ctx.tuning.probe_max_periods, self._probe_after * 2)

    def lower_bound(self, lower: bool) -> None:
        """A limit was learned afresh: whether it is a lower bound, to be searched upward
        (the search starts with no budget refused)."""
        self._lower = lower
        self._ceiling = None

    def reprobe_soon(self, bucket: bool = True) -> None:
        """The learned limit turned out a token bucket (``bucket``) or a sliding window
        counter: its budget was refused for its shape, not its rate. A bucket's budget that
        passed at a window's start was its depth, and it refills at least that much a window:
        its rate is a lower bound, searched upward from there (doubling, with no budget refused
        yet). A counter's rate is probed up at the next period's end, by steps that double
        while they hold (see :meth:`closed`)."""
        if bucket:
            self.lower_bound(True)
        else:
            self._climb, self._probe_gains = True, 0
        self._probe_after, self._last_probe = self.ctx.tuning.probe_after_periods, float("-inf")

    # -- a period used in full -------------------------------------------------------------

    def _hold(self, depth: float) -> float:
        """Seconds an evenly spaced probe must hold (see :func:`_hold`)."""
        limit, t = self.ctx.state.limit, self.ctx.tuning
        if self._back and not self.counter:
            return t.spread_probe_hold  # the rate before a cut held before it
        return _hold(self.candidate, limit, depth, self.doubling(), self.counter, t)

    def doubling(self) -> bool:
        """Whether the limit is searched upward with no budget refused yet (the probes
        double it)."""
        return self.searching() and self._ceiling is None

    def held(self, mono: float, depth: Callable[[], float]) -> bool:
        """Whether a doubling probe spread evenly has held long enough (see :meth:`_hold`)
        at ``mono``: it is kept then, before its period ends (a bucket has no periods; a
        whole one at each doubling took a second a step against nginx)."""
        if self.candidate is None or not self.even() or not self.doubling():
            return False
        if self._waits < 2:
            # A client slower than the probe: held once the host served the client's own pace
            # for spread_probe_hold (see sent).
            return mono - self._candidate_mono >= self.ctx.tuning.spread_probe_hold
        return mono - self._candidate_mono >= self._hold(depth())

    def paced_from(self, mono: float) -> None:
        """The probe under way is paced from ``mono`` (its first request goes then): its
        hold counts from there."""
        if self.candidate is not None:
            self._candidate_mono, self._waits, self._sent = mono, 0, 0

    def sent(self, waited: bool) -> None:
        """A request went at the pace spread evenly; ``waited``: it waited for its place (the
        probe's pace, not the client's own, set when it went). A doubling probe holds early
        after two such (see :meth:`held`). A client slower than the probe shows nothing of
        the host beyond its own pace: held after a gap each, a host with no limit that a
        client reached at 20 a second was doubled to 10^28 a second, and its stored state
        was dropped. Such a probe holds once the host served the client's own pace for
        ``spread_probe_hold``, and the search is over: the host allows all that the client
        sends."""
        self._sent += 1
        self._waits += waited

    def closed(
        self,
        mono: float,
        wall: float,
        refusing: bool,
        depth: Callable[[], float],
        early: bool = False,
        whole: bool = True,
    ) -> bool:
        """A period's budget was used in full without a rejection (``refusing``: the host is
        in an episode), or (``early``) a doubling probe spread evenly :meth:`held` before
        its period's end: a probe under way may hold, and one may start (a narrowing's only
        if the period was used from its start, ``whole``). ``depth`` gives
        the bucket's, for the hold of a probe spread evenly (asked only then). Returns
        whether a probe of another window length starts (its periods count from the start
        of the next period)."""
        ctx = self.ctx
        if self.candidate is not None:
            # A whole period at the probed limit went without a rejection: it holds. (Spread
            # evenly, it must hold long enough to empty a bucket as deep as the host's can be,
            # see Pacer.depth: a bucket absorbs an excess rate until it is empty.)
            # A shorter window must hold for ``narrow_periods`` periods in a row: see Tuning.
            self._candidate_periods += 1
            window = self.candidate.window or 1.0
            if self.even() and not early and self._candidate_periods * window < self._hold(depth()):
                return False
            shorter = _shorter(self.ctx.state.limit, self.candidate) is not None
            if shorter and self._candidate_periods < ctx.tuning.narrow_periods:
                return False
            candidate, self.candidate = self.candidate, None
            if shorter:
                # A shorter window held: a lattice on trial was not the host's, nor its start.
                candidate = replace_limit(candidate, anchor=None)
            searched = self.searching()
            # Spread evenly, the rate a probe raised stays on trial until the next probe (in
            # this run or the next: ``LimitEstimate.held``): its hold shows a bucket as deep
            # as the evidence allows was not emptied, not that the host allows the rate for
            # good (a counter's headroom, a bucket deeper than any burst showed). A refusal
            # of it answers the probe: back to the rate before it, one step down, and the
            # probes spaced out. (Cut by a quarter as any refusal of a rate, a 20 per 10 s
            # counter fell to 0.66 of its rate and climbed back a probe at a time.)
            if self._ceiling is not None:  # in the kept probe's unit
                self._ceiling *= max(1, _times(ctx.state.limit, candidate))
            own = None
            if early and self._waits < 2:  # the client's own pace held (see sent)
                self._lower, self._ceiling = False, None
                own = self._sent / max(mono - self._candidate_mono, 1e-9)
            held = _on_trial(ctx.state.limit, candidate, self._back, own)
            ctx.set_limit(replace_limit(candidate, updated_at=wall, held=held), wall)
            self._ended(searched)
            stepped = not (self._searched or self._back)
            self._probe_gains += stepped
            self._probing = self._back = False
            if self._ceiling is not None and candidate.burst and candidate.burst >= self._ceiling:
                # The host allows now what it refused before: the search is over, and only
                # the slow re-probes go on.
                self._ceiling, self._lower = None, False
            # Spread evenly, a worker alone's next probe follows at once while searching (a
            # period at the rate that held would only delay it) and after a step that held,
            # the steps doubling until one is refused (see Tuning.probe_max_step).
            self._climb = (self.searching() or stepped) and self.even() and self.ctx.share <= 1
            if not (shorter and _narrowing(self.ctx)) and not self._climb:
                return False
            # Narrowing goes on at once: the periods that held were the next probe's.
        self._full_periods += 1
        return self._start(mono, wall, refusing, whole)

    def _start(self, mono: float, wall: float, refusing: bool, whole: bool = True) -> bool:
        """Start a probe if one is due (see :meth:`closed`)."""
        ctx = self.ctx
        limit = ctx.state.limit
        narrowing = _narrowing(self.ctx) and not self.searching()  # one search at a time
        if narrowing and not whole:
            # Counted from a period's start that no request used (a run's first, on a lattice
            # begun before the run), a 93 s window tried on a 90 s host was refused.
            return False
        searching = self.searching() or narrowing
        now = searching or self._climb  # after a single period
        # Workers sharing a host probe in turn, not all at once; and short windows are probed
        # no more often than long ones would be (probe_min_seconds, doubling likewise).
        t = ctx.tuning
        spacing = t.probe_min_seconds * self._probe_after / t.probe_after_periods
        back = not searching and _back(limit, ctx.share, wall - self._refused_wall, t)
        if (
            limit is None
            or limit.burst is None
            or refusing  # no probe while the host still refuses
            or (now and self._full_periods < max(1, ctx.share))  # in turn, shared
            or (
                not now
                and not back
                and (
                    self._full_periods < self._probe_after * max(1, ctx.share)
                    or mono - self._last_probe < spacing * max(1, ctx.share)
                )
            )
        ):
            return False
        self._full_periods = 0
        self._last_probe = mono
        self._probing, self._climb = True, False
        self._probes += 1
        self._searched, self._back = searching, back
        burst, window = _size(self, limit, back, searching and not narrowing, narrowing)
        peak = None if back or burst / window >= (limit.peak or 0.0) else limit.peak
        self.candidate = replace_limit(
            limit, burst=burst, window=window, rate=burst / window, held=None, peak=peak
        )
        self._raised = limit.held is not None
        _forget(self.ctx, "held")  # the rate on trial is no longer
        self._candidate_periods, self._candidate_wall = 0, wall
        self._candidate_mono, self._waits, self._sent = mono, 0, 0
        ENGINE_LOG.debug("%s: probing %d per %.3g s", ctx.host, burst, window)
        return limit.window is not None and window != limit.window

    def searching(self) -> bool:
        """Whether the limit is still being searched for (see ``Tuning.search_gap``)."""
        limit = self.ctx.state.limit
        if not self._lower or limit is None or not limit.burst:
            return False
        if self._ceiling is None:
            return True
        return self._ceiling > max(self.ctx.tuning.search_gap * limit.burst, limit.burst + 1)


def _back(limit: Optional[LimitEstimate], share: int, clean: float, t: Tuning) -> bool:
    """Whether a probe back to the rate before a cut (``LimitEstimate.peak``) is due: the
    pace (spread evenly, or a window's budget, asked at a period's end) of a worker alone
    has held ``clean`` seconds since the last refusal, at least
    ``Tuning.spread_probe_hold``, and the cut took more than a ``probe_step`` off."""
    return (
        limit is not None
        and share <= 1
        and bool(limit.burst)
        and limit.peak is not None
        and limit.peak > limit.rate * (1 + t.probe_step)
        and clean >= t.spread_probe_hold
    )


def carry(prober: Prober, wall: float) -> None:
    """The run ends (the adapter closes) at ``wall``: a step up spread evenly under way, not
    refused (not a search's probe, nor one back to the rate before a cut), is kept on trial
    (``LimitEstimate.held``), so that the next run starts where this one ended and goes on
    with it; a refusal of it there goes back to the budget before it, as a refusal of any
    rate on trial does. (Workers sharing the host keep their search in the store.)"""
    candidate, ctx = prober.candidate, prober.ctx
    if candidate is None or not prober.even() or prober._searched or prober._back:
        return
    held = _held_before(ctx.state.limit, candidate)
    if held is not None and ctx.share <= 1:
        ctx.set_limit(replace_limit(candidate, updated_at=wall, held=held), wall)
        prober.candidate, prober._probing = None, False


def _size(
    prober: Prober, limit: LimitEstimate, back: bool, searching: bool, narrowing: bool
) -> Tuple[int, float]:
    """The budget and window of ``prober``'s next probe above ``limit`` (see
    :meth:`Prober._start`): back to the rate before a cut (``back``), the search's next
    (``searching``), the narrowing of its window under way (``narrowing``), or one step up."""
    t, min_sleep = prober.ctx.tuning, prober.ctx.policy.min_sleep
    window, burst = limit.window or 1.0, limit.burst or 1
    if back and limit.peak:
        # Back to the rate before a cut, in the fewest windows that hold one request more
        # than the budget (see LimitEstimate.peak).
        longer = window * math.ceil(1.0 / (limit.peak * window - burst))
        return math.floor(limit.peak * longer + 1e-6), longer  # (the rate's rounding)
    if searching:
        ceiling = prober._ceiling
        return (burst * 2 if ceiling is None else _between(burst, ceiling)), window
    if narrowing and limit.shortest:
        # The window was measured between a refusal and a recovery found later: probe
        # the geometric middle of what the evidence allows.
        return burst, max(min_sleep, math.sqrt(limit.shortest * window))
    if prober.even() and _coarse(burst, prober._ceiling, t):
        # Spread evenly, the window is only the rate's unit. One request more, a step
        # coarser than the search's precision, was refused: probe the middle in a
        # window twice as long (every probe of 5 per 2.39 s of a 20 per 10 s counter
        # paced at 4, 0.84 of its rate, was refused).
        return 2 * burst + 1, 2 * window
    if (
        prober._probes % 2
        and limit.anchor is None
        and window not in t.round_periods
        and not prober.even()
        and window > min_sleep
    ):
        # The window was measured through probing (an upper bound; not one snapped to a
        # lattice, which is exact): try a shorter one.
        return burst, max(min_sleep, window * (1 - t.probe_step))
    # Like TCP's slow start: each probe that held doubles the next step (the probes of a
    # search or a narrowing are not steps: after a search, the first re-probe is one
    # step).
    step = min(t.probe_max_step, t.probe_step * 2.0**prober._probe_gains)
    return burst + max(1, round(burst * step)), window


def _shorter(limit: Optional[LimitEstimate], candidate: Optional[LimitEstimate]) -> Optional[float]:
    """The window of ``candidate`` if it is shorter than ``limit``'s, else ``None``."""
    if candidate is None or candidate.window is None or limit is None or not limit.window:
        return None
    return candidate.window if candidate.window < limit.window else None


def _trial_refused(ctx: HostContext, wall: float) -> Optional[LimitEstimate]:
    """The rate on trial (``LimitEstimate.held``) was refused at ``wall``: the limit goes back
    to the budget that held before it, and the rate refused is returned (the probe's, refused
    now); ``None`` if no rate is on trial."""
    trial = ctx.state.limit
    if trial is None or trial.held is None or not trial.window or trial.held >= (trial.burst or 0):
        return None
    kept = replace_limit(trial, held=None)
    before = replace_limit(kept, burst=trial.held, rate=trial.held / trial.window, updated_at=wall)
    ctx.set_limit(before, wall)
    return kept


def _part(
    candidate: Optional[LimitEstimate],
    limit: Optional[LimitEstimate],
    sent: int,
    since: float,
    wall: float,
    depth: float,
) -> Optional[LimitEstimate]:
    """Spread evenly, what a probe (``candidate``, from ``limit``, set up at ``since``, ``sent``
    requests since) refused at ``wall`` still shows: the rate its requests went at, cut as any
    refusal of an even pace is (one in those served and the refused one over the host's rate,
    or a bucket's ``depth``; see ``_learner._cut``), where that is above the rate it started
    from; else ``None``. A probe that went long enough shows the host sustains nearly its
    rate, whatever refused it at last: refusals at random, taken for the probe's, had each
    probe of a host with no limit refused, and its pace went down a cut at a time. (Not on a
    sliding window counter, whose headroom, not its rate, a probe fills first: see
    :attr:`Prober.counter`.)"""
    if candidate is None or limit is None or not candidate.window or sent < 2:
        return None
    served = sent - 1
    went = min(candidate.rate, served / max(wall - since, 1e-9))
    burst = math.floor(went * kept_share(served, depth) * candidate.window)
    if burst < 1 or burst / candidate.window <= limit.rate:
        return None
    rate = burst / candidate.window
    return replace_limit(candidate, burst=burst, rate=rate, held=None, updated_at=wall)


def _forget(ctx: HostContext, name: str) -> Optional[LimitEstimate]:
    """Forget a note the learned limit keeps beside its rate: ``held`` (the rate on trial is
    no longer: a refusal came, or a probe starts) or ``peak``. The rate stays, so the limit's
    history notes nothing new. Returns the limit."""
    limit = ctx.state.limit
    if limit is not None and getattr(limit, name) is not None:
        limit = replace_limit(limit, **{name: None})
        ctx.state = ctx.state.replace(limit=limit)
        ctx.dirty = True
    return limit


def _on_trial(
    before: Optional[LimitEstimate], kept: LimitEstimate, back: bool, own: Optional[float]
) -> Optional[int]:
    """The budget a kept probe (``kept``, from ``before``) falls back to while its rate is on
    trial (``LimitEstimate.held``): the one that held before it (:func:`_held_before`), or,
    where the host served the client's own pace (``own``, requests a second: see
    :meth:`Prober.sent`), that pace; ``None`` back at the rate before a cut (``back``: a
    refusal of it is a cut again, not the probe's)."""
    if back:
        return None
    held = _held_before(before, kept)
    if own is None:
        return held
    pace = math.floor(own * (kept.window or 1.0))
    return max(held or 0, pace) if pace < (kept.burst or 0) else None


def _held_before(before: Optional[LimitEstimate], kept: LimitEstimate) -> Optional[int]:
    """The budget a kept probe spread evenly (``kept``) raised from ``before``, in the kept
    probe's window (a whole number of ``before``'s), which stays its rate's fallback while it
    is on trial; else ``None``."""
    times = _times(before, kept)
    if kept.even and before is not None and before.burst and times:
        budget = before.burst * times
        return budget if budget < (kept.burst or 0) else None
    return None


def _times(before: Optional[LimitEstimate], kept: LimitEstimate) -> int:
    """How many of ``before``'s windows make ``kept``'s (1: the same; 2: a probe in a unit
    twice as long, see :func:`_coarse`), or 0 if not a whole number."""
    if before is None or not before.window or not kept.window:
        return 0
    times = round(kept.window / before.window)
    return times if times >= 1 and kept.window == times * before.window else 0


def _coarse(burst: int, ceiling: Optional[int], t: Tuning) -> bool:
    """Whether the smallest budget refused (``ceiling``) is the one above ``burst`` and yet
    more than ``Tuning.search_gap`` above it: whole requests are too coarse a step there."""
    return ceiling == burst + 1 and ceiling > t.search_gap * burst


def _narrowing(ctx: HostContext) -> bool:
    """Whether the learned window is still being narrowed down: it was measured between a
    refusal and a later recovery (``LimitEstimate.shortest``), and the two are more than
    ``Tuning.search_gap`` apart. Only for a worker alone pacing windows whose starts were not
    located on the clock (those are exact, unless their lattice is on trial: longer than the
    episode that located it measured, see LimitLearner), and not below the floor: a refused
    probe costs at least ``min_sleep``."""
    limit = ctx.state.limit
    return (
        limit is not None
        and ctx.policy.pace
        and ctx.share <= 1
        and not limit.even
        and bool(limit.burst)
        and limit.window is not None
        and limit.shortest is not None
        and limit.window > ctx.tuning.search_gap * max(limit.shortest, ctx.policy.min_sleep)
    )


def _between(low: int, high: int) -> int:
    """The geometric middle of two budgets, at least one more than ``low``."""
    return max(low + 1, round(math.sqrt(low * high)))


def _drained(
    candidate: Optional[LimitEstimate],
    limit: Optional[LimitEstimate],
    depth: Optional[float],
    since: float,
    wall: float,
) -> bool:
    """Whether a probe spread evenly (``candidate``, from ``limit``, set up at ``since``)
    was refused at ``wall`` sooner than its excess rate could empty the host's bucket
    (``depth``: :attr:`Prober.bucket_depth`), had the bucket been full when the probe
    began. A bucket paced at a rate it sustains is full: one that was not had been drained
    by the rate the probe started from (a probe of it kept too soon)."""
    if candidate is None or limit is None or depth is None:
        return False
    excess = candidate.rate - limit.rate
    if excess <= 0:
        return False
    # Less one gap at the probe's pace: its first request goes up to a gap after it
    # began (when it was set up), and the bucket refilled meanwhile.
    return wall - since < (depth - 1.0) / excess - 1.0 / candidate.rate


def _hold(
    candidate: Optional[LimitEstimate],
    limit: Optional[LimitEstimate],
    depth: float,
    doubling: bool,
    counter: bool,
    t: Tuning,
) -> float:
    """Seconds an evenly spaced probe (``candidate``, from ``limit``) must hold: at least
    ``spread_probe_hold``, and long enough for its excess rate to empty a bucket ``depth``
    deep (the largest burst the host let through within one window), or, on a sliding
    window counter (``counter``: :attr:`Prober.counter`), to fill it: a window, and the time
    the excess takes to add up to one request. Doubling a lower bound (``doubling``), two
    gaps at the probe's pace may do instead of ``spread_probe_hold``."""
    if candidate is None or limit is None or not limit.window:
        return t.spread_probe_hold
    excess = candidate.rate - limit.rate
    # Doubling a lower bound, the bucket's emptying suffices, and two gaps at the
    # probe's pace (a bucket refuses the second of two requests closer than its rate
    # allows): a probe far past the limit is refused within it. Once a larger rate was
    # refused, probes come near the host's rate, where a refusal comes at random (the
    # machine's jitter against a bucket without a burst) rather than at once: such a
    # probe holds as long as one after the search. (Kept after a period, 9.75 a second
    # against nginx's 10 on a busy machine was refused a few seconds later again and
    # again, each time cut by a quarter: 6 to 7.5 a second.)
    least = 2.0 / candidate.rate if doubling else t.spread_probe_hold
    if excess <= 0 or not depth:
        return least
    if counter:
        # A window counter is filled by the excess from its headroom, not a bucket's
        # depth (see Prober.counter). Held as long as a bucket as deep as its first
        # burst, each step up took 10 s and more, and a 10 per 1 s HAProxy limit was
        # paced at 0.8 of its rate after 150 s.
        return max(least, min(limit.window + 1.0 / excess, t.probe_hold_max))
    return max(least, min(depth / excess, t.probe_hold_max))
