"""The decision on a rejection: how long to wait, and whether the host is held.

From the header (its value, corroborated or not in this episode), the host's category (what
its headers were judged to be worth), the host's stated reset and the engine's own backoff
(aimed at the recoveries observed, or at the next window of the pace), it decides the wait:
obeyed, clamped, stretched, floored at ``min_sleep``, capped at ``max_sleep``, or a hold of
at most ``max_hold``.
"""

from __future__ import annotations

import math
import statistics
from typing import List, Optional, Tuple

from ._context import HostContext
from ._episodes import Episode
from ._pacer import Pacer
from .categories import ALWAYS_ZERO, CONSTANT_OVERSTATED, TRUTHFUL, UNRELIABLE
from .decisions import Code, Decision, Event
from .parsing import ParsedRetryAfter, RateLimitInfo
from .tuning import Tuning

__all__ = ["Decider"]


class Decider:
    """Decides the wait after each rejection of one host.

    Args:
        ctx: the host's shared state and settings.
        pacer: the host's pacer (its window, where a refusal fell in it).
    """

    def __init__(self, ctx: HostContext, pacer: Pacer) -> None:
        self.ctx = ctx
        self._pacer = pacer

    def _drifted(self, episode: Episode) -> bool:
        """Whether the episode began at a paced window's first request (our windows run a
        little ahead of the host's)."""
        return (
            episode.period is not None
            and not episode.period_served
            and not self._pacer.spread()
            and self._pacer.budget() is not None
        )

    def _own_backoff(self, episode: Episode, mono_elapsed: float) -> Tuple[float, float]:
        """The engine's own wait, ``mono_elapsed`` into the episode: one gap at the pace for
        the first retry on the workers' shared schedule; the next try of a fixed window's
        turn in a run's first window (see :mod:`._opening`; refused at that window's end,
        a doubling search from it); a doubling search from one gap
        for a worker alone pacing evenly (never past the recovery observed, doubled
        likewise) or refused inside the first period after a recovery (never past the
        window's next start); that start when a paced window's budget ran out (on a window
        of 5 s or more, after a first retry at the floor: see :func:`_window_retry`); the
        recovery observed (doubling with each refusal); or else a randomised doubling search
        (equal jitter, capped at the time the episode has lasted, or after a refusal at a
        round window's end at the time since halfway to it), as also at a drifted window's
        start.
        Returns the wait and the longest its rule allows (the search's cap, the wait itself
        where aimed at a window's start, else inf)."""
        p, t = self.ctx.policy, self.ctx.tuning
        stretch = 1.0 + t.jitter
        k = episode.fails - 1
        learned = _recovery(self.ctx, episode.status)
        shared = self._pacer.send_gap()
        search = self.ctx.state.search
        spread = self._pacer.spread()
        if shared is not None and (k == 0 or (search is not None and search.probing)):
            # Workers on the host's shared schedule: a bucket refills one request in one gap
            # of the schedule. (Their own recoveries would mislead: each includes its
            # turns behind the other workers.) So also for a retry refused at a probe's rate:
            # that answers the probe (the search goes back to the rate that held), not how
            # long the host refuses.
            return max(p.min_sleep, shared[0]) * self.ctx.rng.uniform(1.0, stretch), math.inf
        budget = self._pacer.budget()
        if not spread and episode.opening and episode.status in (429, 503):
            # A try of the turn of a fixed window's first window in the run: the next try
            # (see _opening), never sooner than the floor.
            now = episode.start_mono + mono_elapsed
            at = self._pacer.opening.next_try(now)
            if at is not None:
                wait = max(p.min_sleep, at - now)
                return wait, wait
            end = self._pacer.opening.last_try()
            if end is not None and now >= end:
                # Still refused at the window's end: the window is longer than learned. A
                # doubling search from that end, each retry twice as far past it as the
                # last (the search from the episode's start, begun at the first try, took
                # steps of a quarter of a window: a window of a minute learned as 55 s
                # turned 2.6 s after its end and was found 14 s late).
                return max(p.min_sleep, now - end) * self.ctx.rng.uniform(1.0, stretch), math.inf
        if spread and budget is not None and episode.opening:
            turn = _turn_retry(self.ctx, self._pacer.opening.turns(), episode, mono_elapsed, budget)
            if turn is not None:
                return turn
        if spread and budget is not None:
            # Paced evenly on its own, a worker refused: a bucket or a counter frees a place
            # every gap at its rate. The recoveries seen were from bursts that emptied the
            # host (the first, unpaced), not from a pace a little too fast: after a refused
            # probe, a 20 per 10 s counter waited 8 s of them, a twentieth of a run, each
            # time; after each refusal of its pace, a 100 per 60 s counter waited 25 s.
            bound = math.inf if learned is None else learned * 2.0 ** min(k, 64)
            return _gap_search(self.ctx, budget, k, bound), math.inf
        if spread:
            budget = None
        next_start = None if budget is None else self._pacer.next_start(episode.start_mono)
        if (
            budget is not None
            and next_start is not None
            and episode.status in (429, 503)
            and episode.after_recovery
            and self.ctx.share <= 1
        ):
            # Refused inside the first period after a recovery: a fixed window has its
            # budget back at its next start, but a sliding window counter still counts
            # requests from before the recovery and frees a place every gap at its rate
            # (see LimitLearner: such a host is paced evenly from then on). Waited to the
            # next start of a window learned from the first burst, each such refusal of a
            # 100 per 60 s counter cost 37 to 75 s.
            left = next_start - episode.start_mono - mono_elapsed
            if left > p.min_sleep:
                return _gap_search(self.ctx, budget, k, left), math.inf
            # Still refused at that start: the window is longer than learned. A doubling
            # search from that start, each retry twice as far past it as the last (the
            # search from the episode's start, doubled on, went on to 68 s after it: a
            # fixed minute's turn, 7 s after a window learned as 45 s, found 62 s late).
            return max(p.min_sleep, -left) * self.ctx.rng.uniform(1.0, stretch), math.inf
        window_start = _window_retry(self.ctx, episode, budget, next_start, k, mono_elapsed)
        if window_start is not None:
            # Aimed where the host lets requests through again (or at the floor, to tell a
            # refusal at random): an unreliable header does not stretch it.
            return window_start, window_start
        # Refused at a paced period's first request, the host's window is about to start:
        # the recoveries seen (from refusals anywhere in a window) would wait far too long.
        drifted = self._drifted(episode)
        if learned is not None and not drifted:
            target = min(p.backoff_cap, max(learned, p.min_sleep) * 2.0**k)
            wait = max(target - mono_elapsed, p.min_sleep) * self.ctx.rng.uniform(1.0, stretch)
        else:
            # No evidence (or a drifted window): a randomised doubling search for the
            # recovery. The wait is drawn from half to all of the time the episode has lasted
            # (and of the exponential cap), so each retry comes 1.5 to 2 times as far into
            # the episode as the last: the first success at most twice as late as the host's
            # recovery, after a number of refusals that grows with its logarithm. (Full
            # jitter capped at twice that time overshot up to three times: 34 s drawn after
            # 19.5 s of refusals on a 20 s window. At a drifted window's start, a step of a
            # twentieth of the window, doubling, was floored at 1 s on a window misread as
            # 4 s long, and overshot a 20 s window's start by 12 s.)
            # Refused at a round window's end (below), the host has a longer window, or is
            # a counter still weighing what it counted: its recovery is due soon after, so
            # the search counts the episode from halfway to that end (Tuning.round_refused).
            ends = _round_ends(episode, t)
            refused_end = _round_passed(ends, episode, mono_elapsed)
            span = t.backoff_span * (mono_elapsed - t.round_refused * refused_end)
            cap = min(p.backoff_cap, p.backoff_base * 2.0**k, max(p.min_sleep, span))
            # Drawn even where a round end replaces it below: the host's random sequence,
            # and so every later wait, stays what it would be without round ends.
            wait = self.ctx.rng.uniform(t.backoff_low * cap, cap)
            boundary = _round_boundary(ends, episode, mono_elapsed)
            if boundary is not None and boundary <= cap:
                # A round window from the host's last recovery (or, before any, from the
                # run's last success) ends within the search's step:
                # retry as it ends, not at a random moment of the step. (A fixed window's
                # 100 requests went as it began, and the next period of a window learned
                # too short was refused for 27.7 s: the random steps found the window's end
                # 11.5 s late.) Never later than the search, so its bound holds.
                wait = boundary
            return max(p.min_sleep, wait), max(p.min_sleep, cap)
        return max(p.min_sleep, wait), math.inf

    def _corroborated(self, episode: Episode, seconds: float, info: RateLimitInfo) -> str:
        """Why ``seconds`` is corroborated in this episode (a countdown, a stated reset that
        agrees), or ``""``."""
        # On a host whose headers were judged unreliable, two random headers that agree by
        # chance (once in forty) are to be expected: there a countdown must count twice.
        if episode.countdown and (self.ctx.state.category != UNRELIABLE or episode.agreed >= 2):
            return "it counts down to a fixed reset time"
        t = self.ctx.tuning
        if info.reset_after is not None and abs(info.reset_after - seconds) <= max(
            t.reset_agrees, t.reset_agrees_share * seconds
        ):
            return "the host's stated reset agrees"
        return ""

    def decide(
        self,
        episode: Episode,
        status: int,
        parsed: ParsedRetryAfter,
        info: RateLimitInfo,
        wall: float,
        attempt: int,
    ) -> Decision:
        """The wait (or hold) after the episode's latest rejection, ``status`` with the header
        ``parsed`` and the stated limit ``info``, at ``wall``; ``attempt`` is the call's."""
        p = self.ctx.policy
        category = self.ctx.state.category
        elapsed = episode.last_fail_mono - episode.start_mono
        own, reach = self._own_backoff(episode, elapsed)
        seconds = parsed.seconds
        trusted = False
        why = ""
        if seconds is not None and seconds >= p.min_sleep:
            why = self._corroborated(episode, seconds, info)
        if seconds is None and info.reset_after is not None and info.reset_after > 0:
            # No header to judge, but the host states when its window resets: a hint.
            wait = max(own, min(info.reset_after, p.max_sleep))
            reason = (
                f"no usable Retry-After ({parsed.reason}); the larger of own backoff and the "
                f"reset the host states ({info.reset_after:.0f} s)"
            )
        elif seconds is None:
            wait = own
            reason = f"no usable Retry-After ({parsed.reason}); own backoff"
        elif why:
            # Evidence in this episode (a countdown, a stated reset that agrees) beats what
            # the host's header was judged to be worth: a maintenance counting down its end
            # is waited out, not probed every two seconds.
            trusted = True
            wait = seconds
            reason = f"Retry-After {seconds:.0f} obeyed: {why}"
        elif category == ALWAYS_ZERO:
            wait = own
            reason = f"Retry-After {seconds:.0f} ignored: host always sends 0; own backoff"
        elif category == UNRELIABLE or episode.scattered or episode.contradicted:
            # A hint that may lengthen own backoff, not replace it: a value uncorrelated with
            # recovery counts up to twice own backoff, or a 97 s header would cost 97 s on a
            # 60 s window; and never past the search's cap, so the first success still comes
            # at most twice as late as the recovery (stretched to 40 s after 59 s of
            # refusals, a retry overshot a 60 s window by 37 s). So also in an episode where
            # the host refused past an obeyed header's time and the header then moved.
            hint = min(seconds, self.ctx.tuning.unreliable_stretch * own, reach)
            wait = max(hint, own)
            reason = (
                f"Retry-After {seconds:.0f} is unreliable here: the larger of it and own backoff"
            )
            if seconds > hint:
                reason += f" ({own:.1f} s), the header counted up to {hint:.1f} s"
        elif category == CONSTANT_OVERSTATED:
            wait = min(seconds, own)
            reason = (
                f"Retry-After {seconds:.0f} overstates this host's recovery: "
                "clamped to the recovery observed"
            )
        elif seconds < p.min_sleep and category == TRUTHFUL:
            trusted = True
            wait = p.min_sleep
            reason = f"Retry-After {seconds:.1f} obeyed, floored at {p.min_sleep:g} s"
        elif seconds < p.min_sleep:
            wait = own
            reason = f"Retry-After {seconds:.0f} is below the floor; own backoff"
        else:
            # Not corroborated (that was decided above).
            if category == TRUTHFUL:
                seen = [o.recovered for o in self.ctx.state.observations if o.recovered is not None]
                reach = self.ctx.tuning.truthful_reach * max(seen, default=0.0)
                ceiling = max(p.plausible_wait, reach)
            else:
                ceiling = p.plausible_wait
            budget = self._pacer.budget()
            if (
                category != TRUTHFUL
                and budget is not None
                and self._drifted(episode)
                and seconds > self.ctx.tuning.drift_header * budget[1]
            ):
                # At a paced window's start the host should be about to let requests through;
                # an unproven header asking for most of a window more contradicts what was
                # learned, so it is probed rather than obeyed.
                wait = own
                reason = (
                    f"Retry-After {seconds:.0f} not yet trusted ({category} host): refused as "
                    f"a learned window of {budget[1]:.0f} s began, the host should be about to "
                    "recover; probing with own backoff"
                )
            elif seconds <= ceiling:
                trusted = True
                wait = seconds
                reason = f"Retry-After {seconds:.0f} obeyed"
            else:
                # Probe: a second rejection whose header counted down corroborates it (the
                # floor spaces it far enough: see Tuning.countdown_probe).
                wait = max(own, self.ctx.tuning.countdown_probe) if episode.fails == 1 else own
                reason = (
                    f"Retry-After {seconds:.0f} not yet trusted ({category} host, larger than "
                    f"{ceiling:.0f} s and uncorroborated); probing with own backoff"
                )
        if wait < p.min_sleep:
            wait = p.min_sleep
            reason += f", floored at {p.min_sleep:g} s"
        if trusted and wait <= p.min_sleep and self.ctx.share > 1:
            # An obeyed wait at the floor says no more than the floor, which is all a header
            # of a bucket refilling in under a second can say. Workers sharing the host that
            # obey it together retry together, and all but one are refused (which judged
            # the header unreliable, and its own backoff then held them for a minute): with
            # several, it is jittered as own backoff is.
            wait *= self.ctx.rng.uniform(1.0, 1.0 + self.ctx.tuning.jitter)
            reason += f", stretched to {wait:.2f} s at random"
        event = Event.SLEEP
        until = 0.0
        if wait > p.max_sleep:
            if trusted:
                event = Event.HOLD
                wait = min(wait, p.max_hold)
                until = wall + wait
                reason += f"; longer than max_sleep {p.max_sleep:g} s, so the host is held"
            else:
                wait = p.max_sleep
                reason += f"; capped at max_sleep {p.max_sleep:g} s"
        return Decision(
            event=event,
            host=self.ctx.host,
            wait=wait,
            reason=reason,
            status=status,
            header=seconds,
            trusted=trusted,
            category=category,
            attempt=attempt,
            until=until,
            code=Code.HOLD
            if event == Event.HOLD
            else (Code.HEADER_OBEYED if trusted else Code.OWN_BACKOFF),
        )


def _recovery(ctx: HostContext, status: int) -> Optional[float]:
    """The host's typical recovery after a rejection of ``status``, from evidence."""
    estimates = []
    for o in ctx.state.observations[-ctx.policy.window :]:
        if o.status != status or o.recovered is None:
            continue
        low = o.failed_until
        estimates.append((low + o.recovered) / 2 if low > 0 else o.recovered)
    return float(statistics.median(estimates)) if estimates else None


def _turn_retry(
    ctx: HostContext,
    turns: List[float],
    episode: Episode,
    mono_elapsed: float,
    budget: Tuple[int, float],
) -> Optional[Tuple[float, float]]:
    """The retry of a refusal of the run's opening (see :mod:`._opening`), ``mono_elapsed``
    into the episode, as :meth:`Decider._own_backoff` gives it: at the next of the ``turns``
    (monotonic) where the host's window may turn; after one that came in the episode
    (refused there, or since), a doubling search from it (one gap at ``budget``'s pace, at
    least the floor), never past the next nor ``Policy.backoff_cap``, as
    :func:`_gap_search`. ``None`` when every turn came before the episode (the opening is
    not what the host refuses)."""
    p = ctx.policy
    now = episode.start_mono + mono_elapsed
    ahead = [turn - now for turn in turns if turn > now]
    passed = [turn for turn in turns if episode.start_mono < turn <= now]
    if not passed:
        if not ahead:
            return None
        return max(p.min_sleep, ahead[0]), max(p.min_sleep, ahead[0])
    step = max(p.min_sleep, budget[1] / budget[0], now - max(passed))
    step *= ctx.rng.uniform(1.0, 1.0 + ctx.tuning.jitter)
    step = min(step, ahead[0] if ahead else math.inf, p.backoff_cap)
    return max(p.min_sleep, step), math.inf


def _gap_search(ctx: HostContext, budget: Tuple[int, float], k: int, bound: float) -> float:
    """The wait before the ``k``-th retry (from 0) of a doubling search from one gap at
    ``budget``'s pace (``(requests, window)``; at least the floor, jittered), never past
    ``bound`` seconds nor ``Policy.backoff_cap``."""
    p = ctx.policy
    step = max(p.min_sleep, budget[1] / budget[0]) * 2.0 ** min(k, 64)
    step *= ctx.rng.uniform(1.0, 1.0 + ctx.tuning.jitter)
    return max(p.min_sleep, min(step, bound, p.backoff_cap))


def _window_retry(
    ctx: HostContext,
    episode: Episode,
    budget: Optional[Tuple[int, float]],
    next_start: Optional[float],
    k: int,
    mono_elapsed: float,
) -> Optional[float]:
    """The ``k``-th retry's wait of a refusal inside a paced window's period (or of a shorter
    window probed), ``mono_elapsed`` into the episode: the window's next start, where the
    host recovers; ``None`` when that does not apply. Inside a period of a window of
    ``Tuning.spread_below`` or more, the first retry goes at the floor: a window whose budget
    ran out stays shut until it ends, so a host that lets it through refused for another
    cause (its load, another client; see ``LimitLearner``). Waited to the window's next
    start, each refusal at random cost a host with no limit up to a window."""
    p, t = ctx.policy, ctx.tuning
    if (
        budget is None
        or next_start is None
        or episode.status not in (429, 503)
        or not (episode.period_served > 0 or episode.shorter is not None)
    ):
        return None
    floor_first = (
        episode.period_served > 0 and episode.shorter is None and budget[1] >= t.spread_below
    )
    if k == 0 and floor_first:
        return p.min_sleep * ctx.rng.uniform(1.0, 1.0 + t.jitter)
    if k != (1 if floor_first else 0):
        return None
    return max(p.min_sleep, next_start - episode.start_mono - mono_elapsed)


def _round_ends(episode: Episode, t: Tuning) -> List[Tuple[float, float]]:
    """The ends (monotonic) of the round windows (``Tuning.round_periods``) that started
    with the host's last recovery from a rate limit (a window start: a fixed window's, on
    the clock or from a first request, or a sliding window's, whose burst went at it), or
    before any such recovery with the run's last success (the window it came in began no
    later: a round window counted from it ends no earlier than the host's; a sliding
    window has all its budget back only then); none without either, or for a status that
    is no rate limit.

    The recovery put the window start between its last refusal and its first success:
    each window's end is given counted from the middle of that bracket and from its end,
    and aimed at in that order (a window start the lattice then locates is late by half the
    bracket at most, not by all of it). Only windows the bracket locates
    (``Tuning.bracket_share``): a start found late puts the ends it implies as late, and a
    window learned from them keeps the lateness (a 20 s window's start, found 3.4 s late,
    cost 4 % of two runs)."""
    bracket = episode.recovered_at
    if bracket is None or episode.status not in (429, 503):
        return []
    low, start = bracket
    return [
        ((low + start) / 2 + w, start + w)
        for w in t.round_periods
        if start - low <= t.bracket_share * w
    ]


def _round_passed(ends: List[Tuple[float, float]], episode: Episode, mono_elapsed: float) -> float:
    """Seconds into the episode of the latest of the round windows' ``ends`` (the
    bracket's end, see :func:`_round_ends`) that came after the episode began and by
    ``mono_elapsed`` into it: a retry the search sent there was refused (the search steps
    to such an end, never past it). 0 if none."""
    begin = episode.start_mono
    passed = [end - begin for _, end in ends if begin < end <= begin + mono_elapsed]
    return max(passed, default=0.0)


def _round_boundary(
    ends: List[Tuple[float, float]], episode: Episode, mono_elapsed: float
) -> Optional[float]:
    """Seconds from ``mono_elapsed`` into the episode until the next of the round windows'
    ``ends`` (see :func:`_round_ends`), or ``None`` if none is ahead."""
    now = episode.start_mono + mono_elapsed
    ahead = [end - now for pair in ends for end in pair if end > now]
    return min(ahead) if ahead else None
