"""The limit learner: a host's window and budget, learned from its rejection episodes.

Unpaced, the requests a host let through between two recoveries and the time until the
second give its window and budget; paced, each refusal corrects them (where in a period it
came, how long it lasted). It also tells a token bucket (paced evenly from then on) from a
window, sporadic refusals from a window too short, and snaps a window to the clock's lattice
where the window starts the episodes located fit one (:mod:`requests_retryafter._lattice`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import List, Optional, Tuple

from . import _lattice
from ._context import HostContext, kept_share, replace_limit
from ._episodes import Episode
from ._pacer import Pacer
from .state import LimitEstimate, Observation
from .tuning import Tuning

__all__ = ["LimitLearner", "Recovery"]


class Recovery(enum.Enum):
    """What a host's recovery from a rejection episode was (:meth:`LimitLearner.ended`)."""

    #: Not from a rate limit (a maintenance, a server error): no window start.
    NONE = "none"
    #: From a rate limit: a window start, which the periods count from.
    WINDOW_START = "window_start"
    #: From a refusal taken for one at random partway through a window's budget: no window
    #: start (the periods and their count go on; see ``LimitLearner._learn``).
    AT_RANDOM = "at_random"


class LimitLearner:
    """Learns one host's window and budget from the episodes that end.

    Args:
        ctx: the host's shared state and settings.
        pacer: the host's pacer (how it paces, and its search for a lower bound).
    """

    def __init__(self, ctx: HostContext, pacer: Pacer) -> None:
        self.ctx = ctx
        self._pacer = pacer
        self._soon_over = _SoonOver(ctx)
        # Where the last rate-limit recovery put a window start: (after, no later than), epoch.
        self._recovered: Optional[Tuple[float, float]] = None
        self._since_turn = _SinceTurn(ctx)

    def success(self) -> None:
        """A 2xx outside an episode (counted towards the successes between sporadic
        refusals)."""
        self._soon_over.success()

    def ended(
        self, episode: Episode, obs: Observation, mono: float, wall: float, turned: bool
    ) -> Recovery:
        """The host recovered from ``episode`` (``obs``, at ``mono``/``wall``; the host's
        window ``turned``, see ``Episode.turned``): learn from it unless it was mixed, or
        answered a try on a host whose statements pace it (a reset predicted from its
        answers, or an even pace on trial: it says only that the try failed, and the
        statements pace the host again, as before it). Returns what the recovery was: from
        a rate limit, a window start unless taken for a refusal at random."""
        at_random = False
        if not episode.mixed and not episode.tried and not episode.opening:
            at_random = self._learn(episode, obs, mono, wall)
        self._since_turn.recovered(obs.at, episode.served, turned)
        if not episode.rate_limited(mono, self.ctx.policy.plausible_wait):
            self._recovered = None
            return Recovery.NONE
        if at_random:
            return Recovery.AT_RANDOM
        # Where this recovery put a window start, for the next episode's cycle (_learn).
        self._recovered = (wall - (mono - episode.last_fail_mono), wall)
        return Recovery.WINDOW_START

    def _learn(self, episode: Episode, obs: Observation, mono: float, wall: float) -> bool:
        """Learn the host's window from a rejection episode that has just ended; returns
        whether it was taken for a refusal at random partway through a window's budget.

        Unpaced, the requests let through since the last recovery (a window start), over the
        time until this recovery, give the window. Paced by a learned window, the rejection
        corrects it: a refusal later in a period means the host lets through only what that
        period did (at most halving the budget at once), unless it was a probe refused just
        past the old budget by a host that recovers at once (a token bucket: paced evenly
        from then on); a refusal at a period's first request that lasts means our periods
        start before the host's windows do (the window is longer; a lattice on trial is not
        the host's, see :func:`_exact`); one that is soon over is
        taken as sporadic and changes nothing, unless such refusals keep coming (see
        ``_SoonOver.again``). Paced evenly, a refused probe changes nothing and another
        refusal decreases the budget multiplicatively. Last,
        :func:`~requests_retryafter._lattice.aligned` may snap the window to the host's lattice.
        """
        if not episode.rate_limited(mono, self.ctx.policy.plausible_wait):
            return False
        if self._pacer.send_gap() is not None:
            # Workers on the host's shared schedule: the shared search took the refusal as it
            # came (:mod:`requests_retryafter._search`). A worker's own episode would mislead:
            # its recovery includes its turns behind the other workers.
            return False
        t = self.ctx.tuning
        sporadic = off_trial = False
        peak: Optional[float] = None
        high = recovery = mono - episode.start_mono
        low = episode.last_fail_mono - episode.start_mono
        if low > 0:
            # Probing found the window's end somewhere between the last refusal and now. Lean
            # early: a window taken too short shows itself in a refusal and grows; one taken
            # too long would only ever waste time.
            recovery = t.lean_early * low + (1 - t.lean_early) * recovery
        share = max(1, self.ctx.share)
        limit = self.ctx.state.limit
        even = limit is not None and limit.even
        # Refused for far longer than the window learned (plus the floor): that window was a
        # misreading, typically of refusals soon over (at random, or a bucket's) or of the
        # partial first window of a run that began near a window's end. It is learned
        # again, from what the host let through since it last turned: the refusals soon
        # over since then showed no turn (a window of 100 a minute refused at random twice
        # in its first seconds was learned as 17 requests, the last refusal's share, per
        # the 34 s its end took, and paced so for good).
        relearn = (
            limit is not None
            and limit.window is not None
            and high > t.relearn_windows * limit.window + self.ctx.policy.min_sleep
        )
        served, span = (
            (episode.turn_served, episode.turn_span) if relearn else (episode.served, episode.span)
        )
        if relearn:
            self._since_turn.mark(episode.served)
        if served < 1 and not (
            limit is None
            and share > 1
            and episode.fails == 1
            and (episode.ready_at is None or episode.ready_at_floor)
            and high < t.spread_below
        ):
            # Nothing went through since the last recovery: nothing to learn, unless nothing
            # was learned yet and the host was over by the first retry, for workers sharing
            # it (the recovery went through: one request in the time it took, as below; a
            # client alone would take a stray refusal of its first request for a limit, and
            # a limit learned so keeps the one a host states from counting).
            return False
        if (
            limit is None
            or not limit.burst
            or not limit.window
            or episode.period is None
            or relearn
        ):
            # Unpaced (or relearned, above): what got through since the last recovery (since
            # the last turn), and when the host recovered, give the window.
            # (Nothing let through before the refusal, over by the first retry within a short
            # window: the host's budget was spent before this worker's first request, by the
            # other workers sharing it, and the recovery went through. Such a worker,
            # learning nothing, sent its next request at once, and a bucket without a burst
            # refused it: a wait for every worker.)
            burst = max(served, 1) * share
            window = max(span + recovery, self.ctx.policy.min_sleep)
            # A host that refused the second request at once lets nothing through in a burst
            # (the token bucket of nginx's limit_req, no burst).
            bucket = burst == share and window < t.spread_below
            # Over by our first retry, the host may have recovered at any moment of the wait:
            # the budget is a lower bound, searched upward (``Tuning.search_gap``). So is a
            # bucket's over at an obeyed header no longer than the floor, which is all its
            # header can say of a refill in under a second; a window's burst at its start is
            # what the host let through (searching it up cost refused probes).
            lower = episode.fails == 1 and (
                episode.ready_at is None or (episode.ready_at_floor and bucket)
            )
            self._pacer.probes.lower_bound(lower)
            # Such a bucket's budget grows evenly spread. A worker alone sees that whether or
            # not its first retry got through; with several workers, one success each may be
            # one of several the host let through together.
            even = bucket and (lower or share == 1)
            self._pacer.probes.bucket_depth = float(burst) if even else None
            self._pacer.probes.counter = False  # learned afresh: no shape shown yet
        else:
            burst, window = limit.burst, limit.window
            let_through = episode.period_served * share
            # Refused inside a period, yet let through at the floor: not the budget, which
            # would have kept the window shut.
            at_floor = let_through > 0 and _over_at_floor(self.ctx, episode, mono, window)
            if episode.probe and (
                self._pacer.spread() or (episode.shorter is not None and episode.fails == 1)
            ):
                # Evenly spaced, a probe refused says only that the larger rate was too much;
                # a shorter window refused and over at the next start of the window that held
                # before, that the host's is longer than the probe (the pacer keeps that as
                # the window's lower bound): the limit it started from stands.
                return False
            if self._pacer.spread():
                # Refused outside a probe: the host allows less than it did (see _cut). A
                # bucket, empty at the refusal, refilled no more than the pace during the
                # episode (a bucket that refuses a pace refills slower than it).
                depth = min(self._pacer.probes.bucket_depth or 1.0, max(1.0, limit.rate * high))
                burst, window = _cut(burst, window, episode.served, depth, t)
                # The rate before the cut (before the first of several) is tried again soon.
                peak = max(limit.peak or 0.0, limit.rate)
            elif episode.shorter is not None:
                # A shorter window refused, and still refused at the next start of the one
                # that held before: the host's window is longer than both, from the start of
                # the period before the probe to this recovery.
                window = max(window, episode.shorter + recovery)
            elif let_through > 0 and _bucket_shown(self.ctx, self._pacer, episode, limit, high):
                # The old budget passed and one more at once did not, yet the host let a
                # request through at the first retry: a token bucket, whose depth caps any
                # burst whatever its rate. Pace it evenly from now on, and probe the rate.
                even = True
                self._pacer.probes.bucket_depth = float(let_through)
                self._pacer.probes.counter = False
                # The probe was refused for its shape, not its rate: the rate is searched
                # from the budget up, as a lower bound.
                self._pacer.probes.reprobe_soon()
            elif (
                at_floor
                and not episode.probe
                and not self._soon_over.partway(burst / share, window)
            ):
                # Unless another came just before (a sliding window counter's, below, refuses
                # again at once), at random: nothing learned, and no window start (restarted
                # there, the periods met the host's window still counting the requests before
                # it, refused until its end and halved).
                return True
            elif episode.after_recovery and share == 1:
                # Refused inside the first period after a recovery, a window's start: this
                # host still counts requests from before it. A sliding window counter does
                # (HAProxy's): a budget sent at once keeps most of the next window shut, and
                # halving it settles at half the rate. The shape was refused, not the rate:
                # spread the budget evenly from now on, as a bucket's, and probe up from it
                # (a doubling search was refused within a second: such a counter is only
                # as deep as its headroom under the limit). That headroom, not the burst it
                # let through, is what a probe fills (see Prober.counter).
                even = True
                self._pacer.probes.bucket_depth = None
                self._pacer.probes.counter = True
                self._pacer.probes.reprobe_soon(bucket=False)
            elif at_floor:
                # Refused inside a period again at once, yet let through at the floor: cut by
                # the share refused, as an even pace is, at most halving (halved each time,
                # refusals at random took a host with no limit, refusing one request in 200,
                # to 0.56 of its pace).
                burst = max(burst // 2, int(burst * kept_share(episode.served)))
            elif let_through > 0:
                # Refused inside a period: this many is what the host lets through now (at
                # most halving at once: with a window taken too short, a sliding window
                # refuses early in a period, and one refusal is not to cut the pace to a
                # trickle).
                burst = max(let_through, burst // 2)
            elif recovery <= t.sporadic_floors * max(self.ctx.policy.min_sleep, 1.0):
                if not self._soon_over.again(mono, wall, window):
                    # Refused at a period's first request and soon over: a sporadic refusal
                    # (the host's load, another client) or a small drift; it says nothing of
                    # the window by itself (but may, with the window starts before it, show
                    # the host's lattice: see below).
                    sporadic = True
                # Such refusals again and again: the windows are too short by at most that
                # much. Grown by the whole of it (the success, not the lean-early guess): grown
                # too little, the refusals go on as before, and that reads as the host's load
                # (the window is put back below the host's).
                else:
                    self._soon_over.grown(window)
                    window += high
            elif limit.anchor is not None and limit.shortest is not None:
                off_trial = True  # a lattice on trial refused at its own start: see _exact
            else:
                # The window that let the previous period through ended only now.
                previous = max(0, episode.period - 1) * window
                grown = min(window + recovery, episode.span + recovery - previous)
                window = max(window, grown)
        if peak is None and not even:
            peak = _budget_peak(limit, burst, window)
        early, late, shortest = _bracket(episode, limit, window, (low, recovery, high))
        # A window longer than one sleep may last is a hold's business, not pacing's: such a
        # cycle comes from long waits (a maintenance, an unreliable header), not a window.
        window = min(window, self.ctx.policy.max_sleep)
        # Only the end of an obeyed wait, with no refusal after it, marks the start of a
        # host's window, within the header's last second (our own backoff only overshoots
        # it); not one at the floor on a host paced evenly: a bucket's refill has no start.
        obeyed = episode.ready_at is not None and not (episode.ready_at_floor and even)
        anchor = wall if episode.fails == 1 and obeyed else None
        if anchor is not None:
            shortest = None  # the header's rounding is no bracket to narrow
        elif limit is not None and window == limit.window and not (off_trial or even):
            # A budget cut on windows of the length that held: the refusal says nothing of
            # where they start, and a lattice located on the clock stays (dropped, a refusal
            # at random put each next budget off to a window after the run's start).
            anchor = limit.anchor
        cycle = None
        if self._recovered is not None:
            # From the previous window start to this one: between the latest the previous
            # can be and the earliest this one can be, and the other way round; over as many
            # windows as the budget learned before went into the cycle's successes.
            before, after = self._recovered
            windows = max(1, round(episode.served / limit.burst)) if limit and limit.burst else 1
            cycle = ((wall - high + low - after) / windows, (wall - before) / windows)
        # A bucket's refill has no start: a host paced evenly has no lattice of windows
        # (a recovery two seconds after the last read as a 2 s lattice halved nginx's pace).
        aligned = (
            None
            if even or off_trial
            else _lattice.aligned(self.ctx, window, window - early, window + late, obs, wall, cycle)
        )
        if sporadic and (aligned is None or limit is None or aligned[0] == limit.window):
            return False  # nothing learned
        if aligned is not None:
            if _exact(aligned[0], window + late):
                shortest = None
            window, anchor = aligned[0], aligned[1] if aligned[1] is not None else anchor
        documented = None if limit is None else limit.documented
        self.ctx.set_limit(
            LimitEstimate(
                burst / window,
                window,
                documented,
                wall,
                "observed",
                burst,
                anchor=anchor,
                by=self.ctx.worker,
                even=even,
                shortest=shortest if shortest is not None and shortest < window else None,
                shares=share,
                peak=peak,
            ),
            wall,
        )
        return False


class _SinceTurn:
    """The recoveries over by the first retry at the floor since the host last turned
    (``Episode.turned``, as the engine counts turns): when each episode began (epoch) and
    what the host let through before it."""

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._soon: List[Tuple[float, int]] = []

    def recovered(self, at: float, served: int, turned: bool) -> None:
        """The episode begun at ``at`` (epoch), after ``served`` successes, ended: the host
        ``turned``, or the recovery was soon over."""
        if turned:
            self._soon.clear()
        else:
            self._soon.append((at, served))

    def mark(self, last: int) -> None:
        """A window shown misread is learned again from what the host let through since it
        last turned (``last``: since the last recovery). A recovery over by the first retry
        since then after which the host let fewer requests through than before it was no
        window start: a run's first window, begun before the run, lets through no more than
        a whole one. It was a refusal at random, partway through one window's budget; its
        episode is marked so (``Observation.at_random``), and locates no window on the
        clock (a window of 100 a minute refused at random after a run's 90th request, its
        retry a second later let through, then 10 more, was located on the clock at that
        second, 54 s before the host's turn, and the next run went at 0.64 of the ideal
        rate). One after which as many or more went may have been the turn of such a first
        window (a run begun a second before the minute's end: 100, then 100)."""
        soon = self._soon
        after = [n for _, n in soon[1:]] + [last]
        unturned = {at for (at, before), n in zip(soon, after) if n < before}
        state = self.ctx.state
        if not any(o.at in unturned and not o.at_random for o in state.observations):
            return
        marked = tuple(
            dataclasses.replace(o, at_random=True) if o.at in unturned else o
            for o in state.observations
        )
        self.ctx.state = state.replace(observations=marked)
        self.ctx.dirty = True


class _SoonOver:
    """A host's refusals over by the first retry at the floor: at a window's first request,
    sporadic unless they keep coming (:meth:`again`); partway through its budget, at random
    unless another came just before (:meth:`partway`)."""

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._last_sporadic = float("-inf")
        # Successes since the last such refusal; and, after a window grew for them, the
        # window before and the successes that had come between two of them.
        self._since_sporadic = 0
        self._grown: Optional[Tuple[float, int]] = None
        self._load_until = float("-inf")
        self._since_partway = 1 << 30

    def success(self) -> None:
        """A 2xx outside an episode."""
        self._since_sporadic += 1
        self._since_partway += 1

    def partway(self, burst: float, window: float) -> bool:
        """Whether a refusal partway through a period's budget of ``burst`` per ``window``
        (this worker's share), over at the first retry at the floor, came soon after the last
        such one (else it is taken for one at random): within ``Tuning.random_again`` times
        the requests that the budget allows a floor."""
        floor = max(self.ctx.policy.min_sleep, 1.0)
        again = self._since_partway < self.ctx.tuning.random_again * burst * floor / window
        self._since_partway = 0
        return again

    def grown(self, window: float) -> None:
        """The ``window`` grew for refusals at its periods' starts (see :meth:`again`)."""
        self._grown = (window, self._since_sporadic)
        self._since_sporadic = 0

    def again(self, mono: float, wall: float, window: float) -> bool:
        """Whether a short refusal at a period's start is one of many that a slower pace
        would avoid (and so the window is to grow), rather than sporadic.

        Refusals within ``probe_after_periods`` windows of each other are not sporadic. But if
        the window grew for them and they keep coming as often per request, the pace is not
        their cause (the host's load is): the window is put back and such refusals are taken
        as sporadic for a long while (``probe_max_periods`` windows)."""
        t = self.ctx.tuning
        again = mono - self._last_sporadic <= t.probe_after_periods * window
        self._last_sporadic = mono
        if not again or mono < self._load_until:
            self._since_sporadic = 0
            return False
        grown, self._grown = self._grown, None
        if grown is not None and self._since_sporadic <= t.sporadic_repeat * grown[1]:
            self._load_until = mono + t.probe_max_periods * window
            self._since_sporadic = 0
            limit = self.ctx.state.limit
            if limit is not None and limit.burst:
                self.ctx.set_limit(
                    replace_limit(limit, window=grown[0], rate=limit.burst / grown[0]), wall
                )
            return False
        return True


def _bucket_shown(
    ctx: HostContext, pacer: Pacer, episode: Episode, limit: LimitEstimate, recovery: float
) -> bool:
    """Whether a refused probe shows a token bucket (see :meth:`LimitLearner._learn`): the
    old budget of a window shorter than ``Tuning.spread_below`` passed, the probe's burst was
    refused after it, and the host let the first retry through. (Refused only just past the
    old budget, a refusal at random read as a bucket less often, but the tail of a host
    refusing at random did not improve: a second run of one in 200 fell to 0.24.)"""
    t = ctx.tuning
    if not episode.probe or not limit.window or limit.window >= t.spread_below:
        return False
    if recovery > t.sporadic_floors * max(ctx.policy.min_sleep, 1.0) or episode.fails > 1:
        return False
    old = pacer.budget(limit)
    return old is not None and episode.period_served >= old[0]


def _bracket(
    episode: Episode,
    limit: Optional[LimitEstimate],
    window: float,
    times: Tuple[float, float, float],
) -> Tuple[float, float, Optional[float]]:
    """How far a ``window`` measured by ``episode`` may be off, ``(early, late)`` (for the
    lattice), and the shortest it can be (``LimitEstimate.shortest``); ``times`` are the
    episode's last refusal, its recovery as learned (leaning early) and its first success,
    from its start. Anywhere back to the last refusal (or to the start of an obeyed
    header's last second). A window kept as it was (``limit``'s) is taken as it is."""
    low, recovery, high = times
    if limit is not None and window == limit.window:
        return 0.0, 0.0, limit.shortest
    early, late = recovery - low, high - recovery
    if episode.fails == 1 and episode.ready_at is not None:
        early = min(early, 1.0)
    # The window is at most what this episode measured (leaning early), and longer than
    # what it measured back to the last refusal: narrowed down by probes (see
    # _prober._narrowing). Grown for a refusal at a period's start, it is longer than the
    # period it grew from.
    shortest = window - early if 0 < early < window else None
    before = None if limit is None else limit.window
    if shortest is not None and before and window > before:
        shortest = max(shortest, before)
    return early, late, shortest


def _budget_peak(limit: Optional[LimitEstimate], burst: int, window: float) -> Optional[float]:
    """The rate before a cut of a window's budget (kept ``window`` long) to ``burst``, to be
    tried again once the cut budget held a period (``LimitEstimate.peak``), as an even
    pace's is; ``None`` if it was not cut. A refusal at random, or a lattice's start
    misplaced by a run's first burst, halved a window of 100 for good (probes climb a
    twentieth a time, every eight windows)."""
    if limit is None or not limit.burst or limit.window != window or burst >= limit.burst:
        return None
    return max(limit.peak or 0.0, limit.rate)


def _over_at_floor(ctx: HostContext, episode: Episode, mono: float, window: float) -> bool:
    """Whether a refusal paced by a ``window`` of ``Tuning.spread_below`` or more was over by
    the first retry of own backoff, at the floor (see ``_decide._window_retry``): a window
    whose budget ran out would have refused it too."""
    return window >= ctx.tuning.spread_below and episode.soon_over(mono, ctx.policy.min_sleep)


def _cut(burst: int, window: float, served: int, depth: float, t: Tuning) -> Tuple[int, float]:
    """An even pace of ``burst`` per ``window`` refused outside a probe, after ``served``
    successes since the last refusal: decreased multiplicatively, by the share of requests
    over the host's rate, at most by a quarter (``Tuning.spread_decrease``).

    A bucket that refilled ``depth`` during the retry's wait (``Prober.bucket_depth``, where
    shown in this run, at most the pace times the episode's length; else 1) lets that through
    and then its rate: of the requests let through until the next refusal, ``depth`` was the
    excess over its rate, so the pace is ``depth / (served + 1)`` over it (a counter, or a
    host that refuses at random, one request in ``served + 1``). Cut by a quarter for each,
    refusals at random (a host's load, other clients behind its limit) took a host with no
    limit, refusing one request in 200, to 0.56 of an unpaced client's pace in one crawl and
    to 0.12 in the next. Cut by one in
    ``served + 1`` on a bucket 6 deep, a pace of 24 a second took ten refusals to come down
    to the bucket's 20. A share of one request or more comes off the budget (a quarter,
    rounded down; less, to the nearest budget), so that the window, and the bounds of a
    search of the budget, stand: the window lengthened instead, the search against nginx's
    ``burst=5`` stopped, and the pace stayed a tenth lower for 20 s. Less than one request
    (and of a budget of one request) lengthens the window. Where in the period the refusal
    came says little when the budget is spread over the window."""
    keep = max(t.spread_decrease, kept_share(served, depth))
    if burst == 1 or burst * keep > burst - 1:
        return burst, window / keep  # less than one request: the window grows
    if keep == t.spread_decrease:
        return int(burst * keep), window  # a quarter: whole requests, rounded down
    return max(1, round(burst * keep)), window  # the nearest budget


def _exact(period: float, longest: float) -> bool:
    """Whether a window snapped to a lattice of ``period`` is exact: not longer than the
    ``longest`` the episode that located it allows.

    A longer lattice only the cycle between two recoveries allowed, and a recovery at a
    round end own backoff's search aimed at fits that length by construction: it is on
    trial (its anchor kept with ``LimitEstimate.shortest``), narrowed from the shortest the
    episode allows as any window measured late is (see ``_prober._narrowing``). A fixed
    window of 45 s, taken for a minute's lattice as exact, let each budget through at 60 s
    and went at 0.76 of its rate in both runs. A shorter window that holds drops the
    lattice and its start; so does a refusal at the lattice's own start that is not soon
    over, the window staying an upper bound (grown for that refusal, as a window counted
    from a recovery is, it was snapped back as exact: a 90 s window on trial as 120 s went
    at 120 s for good).
    """
    return period <= longest
