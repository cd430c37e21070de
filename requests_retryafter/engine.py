"""The per-host engine: episodes, decisions, learned limits and pacing.

Pure of I/O: a :class:`HostTracker` is told what happened (a 2xx, a rejection, a stated limit)
and the time, and answers with decisions. The adapter does the HTTP, the sleeping and the
storing. Not thread-safe by itself: the adapter calls it under the host's lock.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import statistics
from typing import Any, Optional, Tuple

from ._episodes import Episode
from .categories import (
    ALWAYS_ZERO,
    CONSTANT_OVERSTATED,
    TRUTHFUL,
    UNRELIABLE,
    judge,
)
from .decisions import Code, Decision, Event
from .parsing import ParsedRetryAfter, RateLimitInfo
from .policy import Policy
from .state import MAX_LIMIT_HISTORY, MAX_RATE, MAX_SECONDS, HostState, LimitEstimate, Observation
from .tuning import TUNING, Tuning

__all__ = ["Decision", "Event", "HostTracker"]

log = logging.getLogger(__name__)


class _Countdown:
    """A wait or hold that the state keeps as epoch seconds (so other processes and later runs
    honour it), counted down in this process on the monotonic clock.

    The first time this process sees an end time, what is left of it is fixed as
    ``min(until - now, until - since, cap)``: never longer than the wait was granted for
    (``since`` is when it was granted), whatever the wall clock did since (an NTP step back, a
    resumed VM), and never longer than ``cap``. From then on it runs on monotonic time.
    """

    __slots__ = ("ends", "until")

    def __init__(self) -> None:
        self.until = 0.0
        self.ends = 0.0

    def left(
        self, until: float, since: float, cap: float, mono: Optional[float], wall: float
    ) -> float:
        """Seconds left of the wait ending at epoch ``until`` (0 when over)."""
        if until <= 0:
            return 0.0
        granted = until - since if 0 < since <= until else cap
        fresh = max(0.0, min(until - wall, granted, cap))
        if mono is None:
            return fresh
        if until != self.until:
            self.until, self.ends = until, mono + fresh
        return max(0.0, self.ends - mono)


class HostTracker:
    """What one adapter knows and does about one host.

    Args:
        state: the host's state to start from (from the store, or a new one).
        policy: the adapter's policy.
        rng: the random source for jitter.
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
        self.state = state
        #: The engine's thresholds.
        self.tuning = tuning
        #: This adapter's id among the workers sharing a store.
        self.worker = worker
        #: Workers pacing this host together (1 unless a shared store says otherwise).
        self.share = 1
        self._rank = 0
        self.policy = policy
        self.rng = rng
        self.host = state.host
        #: Monotonic time before which no request may go (the host's shared wait).
        self.not_before = 0.0
        self.episode: Optional[Episode] = None
        # The current cycle: from the last recovery (a window start) until the next one.
        self._cycle_begin: Optional[float] = None
        self._cycle_served = 0
        # The pacer: budget per period, periods counted from the anchor (a recovery).
        self._anchor: Optional[float] = None
        self._period = 0
        self._period_count = 0
        self._full_periods = 0
        self._probe_after = tuning.probe_after_periods
        self._probing = False
        self._probes = 0
        self._last_probe = float("-inf")
        self._probe_gains = 0
        # The search for a limit learned as a lower bound: whether it is one, and the
        # smallest budget (of the same window) refused since.
        self._lower = False
        self._ceiling: Optional[int] = None
        #: A larger limit being tried; it replaces the learned one after a clean, full period.
        self._candidate: Optional[LimitEstimate] = None
        self._candidate_periods = 0
        self._last_sporadic = float("-inf")
        # Successes since the last such refusal; and, after a window grew for them, the
        # window before and the successes that had come between two of them.
        self._since_sporadic = 0
        self._grown: Optional[Tuple[float, int]] = None
        self._load_until = float("-inf")
        self._next_slot = 0.0
        self._blocked = _Countdown()
        self._hold = _Countdown()
        self._ignored_statement = ""
        # The earliest moment (monotonic) the host's stated reset can be, from every answer
        # since the last one: each stated reset is whole seconds, rounded up, so each answer
        # bounds the reset from above, and the smallest bound is the closest.
        self._reset_by: Optional[float] = None
        # Where the last rate-limit recovery put a window start: (after, no later than), epoch.
        self._recovered: Optional[Tuple[float, float]] = None
        # Whether the host's last 2xx stated what remains of its window and when it resets:
        # those statements then pace it (a stated rate alone is paced evenly).
        self._counted = False
        #: Whether the state changed in a way worth writing to the store soon.
        self.dirty = False

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
        p, state = self.policy, self.state
        left = self._hold.left(state.held_until, state.held_since, p.max_hold, mono, wall)
        if left > 0:
            return left, state.hold_reason
        wait = self._shared_wait(wall, mono)
        if wait > p.max_sleep:
            return wait, (
                f"the host's wait ends in {wait:.0f} s, longer than this adapter's max_sleep "
                f"({p.max_sleep:g} s)"
            )
        return 0.0, ""

    def _shared_wait(self, wall: float, mono: Optional[float]) -> float:
        state = self.state
        shared = self._blocked.left(
            state.blocked_until, state.blocked_since, self.policy.max_hold, mono, wall
        )
        return max(shared, 0.0 if mono is None else self.not_before - mono)

    def gate(self, mono: float, wall: float) -> float:
        """Seconds to wait before a request may go (shared wait, including other workers')."""
        return self._shared_wait(wall, mono)

    def pace_rate(self) -> Optional[float]:
        """Requests per second this adapter paces the host at, or ``None`` for no pacing."""
        if not self.policy.pace or self.state.limit is None:
            return None
        return self.state.limit.rate * self.policy.utilization / max(1, self.share)

    def budget(self, limit: Optional[LimitEstimate] = None) -> Optional[Tuple[int, float]]:
        """``(requests, seconds)``: this adapter's share of the learned window, if any (of
        the window being probed, while a probe is under way; of ``limit`` if given)."""
        limit = limit or self._candidate or self.state.limit
        if not self.policy.pace or limit is None or not limit.burst or not limit.window:
            return None
        # Split the window between the workers; the first ``burst % share`` take one more.
        share = max(1, self.share)
        extra = 1 if self._rank < limit.burst % share else 0
        return max(1, limit.burst // share + extra), limit.window

    def spread(self) -> bool:
        """Whether the host is paced evenly, as a token bucket (see ``LimitEstimate.even``);
        otherwise each window's budget goes at the window's start."""
        limit = self._candidate or self.state.limit
        return limit is not None and limit.even

    def heartbeat(self, wall: float) -> None:
        """Record this worker as pacing the host (shared stores), and count the workers."""
        if not self.worker or not self.policy.pace:
            return
        if self.state.limit is None and self.episode is None and not self.state.observations:
            return  # a host that never refused needs no shared pace
        self.state = self.state.with_worker(self.worker, wall)
        active = self.state.active_worker_ids(wall)
        self.share = max(1, len(active))
        self._rank = active.index(self.worker) if self.worker in active else 0
        self.dirty = True

    def reserve(self, mono: float, wall: float) -> float:
        """Reserve the next request's place; return seconds to wait for it (0: go now).

        With a learned window, up to ``burst`` requests go at once at the start of each
        window (counted from the last recovery, which is a window start); the next waits for
        the following window. With only a stated rate, requests are spaced evenly.
        """
        budget = self.budget()
        if budget is None:
            rate = self.pace_rate()
            if rate is None or rate <= 0 or self._counted:
                return 0.0
            slot = max(mono, self._next_slot)
            self._next_slot = slot + 1.0 / rate
            return min(slot - mono, self.policy.max_hold)
        allowed, period = budget
        if self._anchor is None:
            # Keep in step with the windows a previous run or worker saw start, if any.
            self._anchor, self._period, self._period_count = self._in_step(mono, wall), 0, 0
        current = int((mono - self._anchor) // period)
        if self._period < current:
            self._close_period(allowed, mono, wall)
            self._period, self._period_count = current, 0
        if self._period_count >= allowed:
            self._close_period(allowed, mono, wall)
            self._period, self._period_count = self._period + 1, 0
        place = self._period_count
        self._period_count += 1
        start = self._anchor + self._period * period
        if self.spread():
            start += place * period / allowed
        # A wait longer than max_sleep becomes a hold, and no hold outlasts max_hold.
        return min(max(0.0, start - mono), self.policy.max_hold)

    def _in_step(self, mono: float, wall: float) -> float:
        """The pacer's anchor at ``mono``: the start of the learned lattice's current window
        when a window start was located (``LimitEstimate.anchor``), else ``mono`` itself."""
        limit = self.state.limit
        if limit is None or limit.anchor is None or not limit.window:
            return mono
        return mono - (wall - limit.anchor) % limit.window

    def release(self, mono: float) -> None:
        """Give back the last reserved place (the call stopped before using it)."""
        if self.budget() is not None:
            self._period_count = max(0, self._period_count - 1)
            return
        rate = self.pace_rate()
        if rate:
            self._next_slot = max(mono, self._next_slot - 1.0 / rate)

    def _probe_hold(self) -> float:
        """Seconds an evenly spaced probe must hold: at least ``spread_probe_hold``, and long
        enough for its excess rate to empty the bucket (as deep as the largest burst the host
        let through within one window)."""
        candidate, limit = self._candidate, self.state.limit
        t = self.tuning
        if candidate is None or limit is None or not limit.window:
            return t.spread_probe_hold
        excess = candidate.rate - limit.rate
        bursts = [o.served for o in self.state.observations if o.span <= limit.window]
        depth = max([*bursts, limit.burst or 0])
        # Searching up from a lower bound, one period suffices beside the bucket's emptying:
        # a probe far past the limit is refused within it, and one a little past it is
        # corrected by the multiplicative decrease of a later refusal.
        least = limit.window if self._searching() else t.spread_probe_hold
        if excess <= 0 or not depth:
            return least
        return max(least, min(depth / excess, t.probe_hold_max))

    def _close_period(self, allowed: int, mono: float, wall: float) -> None:
        """A period ends: count it if its budget was used without a rejection, and probe up."""
        if self._period_count < allowed:
            return
        if self._candidate is not None:
            # A whole period at the probed limit went without a rejection: it holds. (Spread
            # evenly, it must hold long enough to empty a bucket as deep as the deepest burst
            # seen: a bucket absorbs an excess rate until it is empty.)
            self._candidate_periods += 1
            window = self._candidate.window or 1.0
            if self.spread() and self._candidate_periods * window < self._probe_hold():
                return
            candidate, self._candidate = self._candidate, None
            self._set_limit(_replace_limit(candidate, updated_at=wall), wall)
            self._probe_gains += 1
            self._probing = False
            if self._ceiling is not None and candidate.burst and candidate.burst >= self._ceiling:
                # The host allows now what it refused before: the search is over, and only
                # the slow re-probes go on.
                self._ceiling, self._lower = None, False
            return
        self._full_periods += 1
        limit = self.state.limit
        searching = self._searching()
        # Workers sharing a host probe in turn, not all at once; and short windows are probed
        # no more often than long ones would be (probe_min_seconds, doubling likewise).
        t = self.tuning
        spacing = t.probe_min_seconds * self._probe_after / t.probe_after_periods
        if (
            limit is None
            or limit.burst is None
            or self.episode is not None  # no probe while the host still refuses
            or (searching and self._full_periods < max(1, self.share))  # in turn, shared
            or (
                not searching
                and (
                    self._full_periods < self._probe_after * max(1, self.share)
                    or mono - self._last_probe < spacing * max(1, self.share)
                )
            )
        ):
            return
        self._full_periods = 0
        self._last_probe = mono
        self._probing = True
        self._probes += 1
        window = limit.window or 1.0
        if searching:
            ceiling = self._ceiling
            burst = limit.burst * 2 if ceiling is None else _between(limit.burst, ceiling)
        elif (
            self._probes % 2
            and limit.anchor is None
            and window not in t.round_periods
            and not self.spread()
            and window > self.policy.min_sleep
        ):
            # The window was measured through probing (an upper bound; not one snapped to a
            # lattice by _aligned, which is exact): try a shorter one.
            window = max(self.policy.min_sleep, window * (1 - t.probe_step))
            burst = limit.burst
        else:
            # Like TCP's slow start: each probe that held doubles the next step.
            step = min(t.probe_max_step, t.probe_step * 2.0**self._probe_gains)
            burst = limit.burst + max(1, round(limit.burst * step))
        self._candidate = _replace_limit(limit, burst=burst, window=window, rate=burst / window)
        self._candidate_periods = 0
        log.debug("%s: probing %d per %.3g s", self.host, burst, window)

    def _searching(self) -> bool:
        """Whether the limit is still being searched for (see ``Tuning.search_gap``)."""
        limit = self.state.limit
        if not self._lower or limit is None or not limit.burst:
            return False
        if self._ceiling is None:
            return True
        return self._ceiling > max(self.tuning.search_gap * limit.burst, limit.burst + 1)

    # -- what happened ------------------------------------------------------------------

    def on_success(self, mono: float, wall: float) -> Optional[Decision]:
        """Record a 2xx. Returns a category-change decision when the host was re-judged."""
        episode = self.episode
        if episode is None:
            if self._cycle_begin is None:
                self._cycle_begin = mono
            self._cycle_served += 1
            self._since_sporadic += 1
            return None
        self.episode = None
        obs = episode.observation(mono - episode.start_mono)
        if not episode.mixed:
            self._learn_limit(episode, obs, mono, wall)
        # A recovery from a rate limit is a window start: the next cycle and the pacer's
        # periods count from it. (The end of a maintenance or a hold is not.)
        rate_limited = episode.rate_limited(mono, self.policy.plausible_wait)
        # Where this recovery put a window start, for the next episode's cycle (_learn_limit).
        self._recovered = (wall - (mono - episode.last_fail_mono), wall) if rate_limited else None
        self._cycle_begin, self._cycle_served = mono, 1
        if rate_limited or self._anchor is None:
            # In step with the host's windows where located (a little before now, or now).
            self._anchor, self._period, self._period_count = self._in_step(mono, wall), 0, 1
        return self._add_observation(obs, wall)

    def on_stated_limit(self, info: RateLimitInfo, mono: float, wall: float) -> None:
        """Take a server's statement of its limit as evidence (never as an order).

        A stated rate seeds pacing only while nothing was learned; it is always kept as the
        documented figure for reports. ``Remaining: 0`` with a short reset holds the next
        request until the reset, as the host asked, within ``max_sleep``.
        """
        absurd = self._absurd(info)
        if absurd:
            if absurd != self._ignored_statement:
                self._ignored_statement = absurd
                log.info("%s: stated limit ignored: %s", self.host, absurd)
            return
        if info.limit and info.window:
            documented = info.limit / info.window
            limit = self.state.limit
            if limit is None:
                self._set_limit(
                    LimitEstimate(documented, info.window, documented, wall, "stated"), wall
                )
            elif limit.documented != documented:
                self.state = self.state.replace(limit=_replace_limit(limit, documented=documented))
                self.dirty = True
        self._counted = info.remaining is not None and info.reset_after is not None
        if info.reset_after is not None and info.reset_after >= 0:
            stated = mono + info.reset_after
            if self._reset_by is None or mono >= self._reset_by or stated < self._reset_by:
                self._reset_by = stated  # a new window, or a closer bound on this one's end
        if info.remaining == 0 and self._reset_by is not None:
            # Wait for the closest bound on the reset, not for the one this answer states
            # (a reset rounded up from 0.2 s reads 1 s: on a 1 s window, waiting for it would
            # halve the rate).
            wait = min(self._reset_by - mono, self.policy.max_sleep)
            if wait > 0:
                self.not_before = max(self.not_before, mono + wait)

    def _absurd(self, info: RateLimitInfo) -> str:
        """Why a stated limit cannot be meant (and so is no evidence), or ``""``."""
        p = self.policy
        if info.window is not None and info.window > p.max_hold:
            return f"a window of {info.window:.0f} s is longer than max_hold ({p.max_hold:g} s)"
        if info.limit is not None and info.window and info.limit / info.window > MAX_RATE:
            return f"{info.limit} requests per {info.window:g} s is more than any host answers"
        if info.reset_after is not None and info.reset_after > MAX_SECONDS:
            return f"a reset in {info.reset_after:.0f} s is later than any clock reaches"
        return ""

    def on_rejection(
        self,
        status: int,
        parsed: ParsedRetryAfter,
        info: RateLimitInfo,
        mono: float,
        wall: float,
        attempt: int,
    ) -> Decision:
        """Record a 429/503 and decide the wait (or a hold). Sets the host's shared wait."""
        episode = self.episode
        t = self.tuning
        if episode is not None and mono - episode.start_mono > t.stale_episode:
            self._add_observation(episode.observation(None), wall)
            episode = self.episode = None
        if episode is None:
            begin = self._cycle_begin
            span = 0.0 if begin is None else mono - begin
            episode = self.episode = Episode(
                status, parsed, mono, wall, self._cycle_served, span, t
            )
            if self.budget() is not None and self._anchor is not None:
                episode.period = self._period
                episode.period_served = max(0, self._period_count - 1)
            if self._probing and not self._searching():
                self._probe_after = min(t.probe_max_periods, self._probe_after * 2)
            limit = self.state.limit
            if (
                self._candidate is not None
                and self._candidate.burst
                and limit is not None
                and self._candidate.window == limit.window
            ):
                self._ceiling = min(self._ceiling or self._candidate.burst, self._candidate.burst)
            episode.probe = self._candidate is not None
            self._candidate = None
            self._probe_gains = 0
            self._probing = False
            self._full_periods = 0
        else:
            episode.follow(status, parsed, mono, wall)
        decision = self._decide(episode, status, parsed, info, wall, attempt)
        episode.ready_at = mono + decision.wait if decision.trusted else None
        if decision.event == Event.HOLD:
            episode.mixed = True
            self.state = self.state.replace(
                held_until=decision.until,
                held_since=wall,
                hold_reason=decision.reason,
                updated_at=wall,
            )
        self.not_before = max(self.not_before, mono + decision.wait)
        if wall + decision.wait > self.state.blocked_until:
            self.state = self.state.replace(blocked_until=wall + decision.wait, blocked_since=wall)
        self.state = self.state.replace(updated_at=wall)
        self.dirty = True
        return decision

    # -- internals ----------------------------------------------------------------------

    def _recovery(self, status: int) -> Optional[float]:
        """The host's typical recovery after a rejection of ``status``, from evidence."""
        estimates = []
        for o in self.state.observations[-self.policy.window :]:
            if o.status != status or o.recovered is None:
                continue
            low = o.failed_until
            estimates.append((low + o.recovered) / 2 if low > 0 else o.recovered)
        return float(statistics.median(estimates)) if estimates else None

    def _drifted(self, episode: Episode) -> bool:
        """Whether the episode began at a paced window's first request (our windows run a
        little ahead of the host's)."""
        return (
            episode.period is not None
            and not episode.period_served
            and not self.spread()
            and self.budget() is not None
        )

    def _own_backoff(self, episode: Episode, mono_elapsed: float) -> float:
        p, t = self.policy, self.tuning
        stretch = 1.0 + t.jitter
        k = episode.fails - 1
        learned = self._recovery(episode.status)
        budget = None if self.spread() else self.budget()
        if (
            k == 0
            and budget is not None
            and self._anchor is not None
            and episode.status in (429, 503)
            and episode.period_served > 0
        ):
            # The learned window's budget ran out inside a period: the host recovers when
            # the next window starts.
            mono = episode.start_mono
            next_start = self._anchor + (int((mono - self._anchor) // budget[1]) + 1) * budget[1]
            return max(p.min_sleep, next_start - mono)
        if self._drifted(episode) and budget is not None:
            # Refused at a paced period's first request: our windows run a little ahead of
            # the host's, whose window ends soon. Step out by a small part of a window.
            wait = min(p.backoff_cap, t.drift_step * budget[1] * 2.0**k)
            wait *= self.rng.uniform(1.0, stretch)
        elif learned is not None:
            target = min(p.backoff_cap, max(learned, p.min_sleep) * 2.0**k)
            wait = max(target - mono_elapsed, p.min_sleep) * self.rng.uniform(1.0, stretch)
        else:
            # Full jitter, capped also at twice the time the episode has lasted: the first
            # success then comes at most about three times as late as the host's recovery (a
            # draw of 100 s after 21 s of refusals would overshoot a 30 s window by 90 s).
            span = t.full_jitter_span * mono_elapsed
            cap = min(p.backoff_cap, p.backoff_base * 2.0**k, max(p.min_sleep, span))
            wait = self.rng.uniform(0.0, cap)
        return max(p.min_sleep, wait)

    def _corroborated(self, episode: Episode, seconds: float, info: RateLimitInfo) -> str:
        """Why ``seconds`` is corroborated in this episode (a countdown, a stated reset that
        agrees), or ``""``."""
        if episode.countdown:
            return "it counts down to a fixed reset time"
        t = self.tuning
        if info.reset_after is not None and abs(info.reset_after - seconds) <= max(
            t.reset_agrees, t.reset_agrees_share * seconds
        ):
            return "the host's stated reset agrees"
        return ""

    def _decide(
        self,
        episode: Episode,
        status: int,
        parsed: ParsedRetryAfter,
        info: RateLimitInfo,
        wall: float,
        attempt: int,
    ) -> Decision:
        p = self.policy
        category = self.state.category
        elapsed = episode.last_fail_mono - episode.start_mono
        own = self._own_backoff(episode, elapsed)
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
        elif category == UNRELIABLE or episode.scattered:
            # A hint that may lengthen own backoff, not replace it: a value uncorrelated with
            # recovery counts up to twice own backoff, or a 97 s header would cost 97 s on a
            # 60 s window.
            hint = min(seconds, self.tuning.unreliable_stretch * own)
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
                seen = [o.recovered for o in self.state.observations if o.recovered is not None]
                reach = self.tuning.truthful_reach * max(seen, default=0.0)
                ceiling = max(p.plausible_wait, reach)
            else:
                ceiling = p.plausible_wait
            budget = self.budget()
            if (
                category != TRUTHFUL
                and budget is not None
                and self._drifted(episode)
                and seconds > self.tuning.drift_header * budget[1]
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
                wait = max(own, self.tuning.countdown_probe) if episode.fails == 1 else own
                reason = (
                    f"Retry-After {seconds:.0f} not yet trusted ({category} host, larger than "
                    f"{ceiling:.0f} s and uncorroborated); probing with own backoff"
                )
        if wait < p.min_sleep:
            wait = p.min_sleep
            reason += f", floored at {p.min_sleep:g} s"
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
            host=self.host,
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

    def _add_observation(self, obs: Observation, wall: float) -> Optional[Decision]:
        state = self.state.with_observation(obs)
        return self.rejudge(state, wall)

    def rejudge(self, state: HostState, wall: float) -> Optional[Decision]:
        """Adopt ``state`` and re-judge its category; return a decision if it changed."""
        before = state.category
        verdict = judge(state.observations, previous=before, window=self.policy.window)
        state = state.replace(evidence=verdict.evidence, updated_at=max(state.updated_at, wall))
        if verdict.category != before:
            state = state.replace(category=str(verdict.category), category_changed_at=wall)
        self.state = state
        self.dirty = True
        if verdict.category == before:
            return None
        return Decision(
            event=Event.CATEGORY,
            host=self.host,
            reason=f"category {before} -> {verdict.category}: {verdict.evidence}",
            category=verdict.category,
            code=Code.CATEGORY,
        )

    def _learn_limit(self, episode: Episode, obs: Observation, mono: float, wall: float) -> None:
        """Learn the host's window from a rejection episode that has just ended.

        Unpaced, the requests let through since the last recovery (a window start), over the
        time until this recovery, give the window. Paced by a learned window, the rejection
        corrects it: a refusal later in a period means the host lets through only what that
        period did (at most halving the budget at once), unless it was a probe refused just
        past the old budget by a host that recovers at once (a token bucket: paced evenly
        from then on); a refusal at a period's first request that lasts means our periods
        start before the host's windows do (the window is longer); one that is soon over is
        taken as sporadic and changes nothing, unless such refusals keep coming (see
        :meth:`_sporadic_again`). Paced evenly, a refused probe changes nothing and another
        refusal decreases the budget multiplicatively. Last, :meth:`_aligned` may snap the
        window to the host's lattice.
        """
        if not episode.rate_limited(mono, self.policy.plausible_wait) or episode.served < 1:
            return
        t = self.tuning
        sporadic = False
        high = recovery = mono - episode.start_mono
        low = episode.last_fail_mono - episode.start_mono
        if low > 0:
            # Probing found the window's end somewhere between the last refusal and now. Lean
            # early: a window taken too short shows itself in a refusal and grows; one taken
            # too long would only ever waste time.
            recovery = t.lean_early * low + (1 - t.lean_early) * recovery
        share = max(1, self.share)
        limit = self.state.limit
        even = limit is not None and limit.even
        relearn = (
            limit is not None
            and limit.window is not None
            and self.spread()
            and high > t.relearn_windows * limit.window + self.policy.min_sleep
        )
        if (
            limit is None
            or not limit.burst
            or not limit.window
            or episode.period is None
            or relearn
        ):
            # Unpaced (or, spread evenly, refused for far longer than a bucket's refill: the
            # short window was a misreading, typically the partial first window of a run that
            # began near a window's end): what got through since the last recovery, and when
            # the host recovered, give the window.
            # Over by our first retry, the host may have recovered at any moment of the wait:
            # the budget is a lower bound, searched upward (``Tuning.search_gap``).
            burst = episode.served * share
            window = max(episode.span + recovery, self.policy.min_sleep)
            self._lower = episode.fails == 1 and episode.ready_at is None
            self._ceiling = None
            # A host that refused the second request at once lets nothing through in a burst:
            # its budget grows evenly spread (the token bucket of nginx's limit_req, no burst).
            even = self._lower and burst == share and window < t.spread_below
        else:
            burst, window = limit.burst, limit.window
            let_through = episode.period_served * share
            if episode.probe and self.spread():
                # Evenly spaced, a probe refused says only that the larger rate was too much:
                # the limit it started from stands.
                return
            if self.spread():
                # Refused outside a probe: the host allows less than it did. Decrease
                # multiplicatively; where in the period the refusal came says little when
                # the budget is spread over the window.
                burst = max(1, min(burst - 1, int(burst * t.spread_decrease)))
            elif let_through > 0 and self._bucket_shown(episode, limit, high):
                # The old budget passed and one more at once did not, yet the host let a
                # request through at the first retry: a token bucket, whose depth caps any
                # burst whatever its rate. Pace it evenly from now on, and probe the rate.
                even = True
                self._ceiling = None
                # The probe was refused for its shape, not its rate: probe again soon.
                self._probe_after, self._last_probe = t.probe_after_periods, float("-inf")
            elif let_through > 0:
                # Refused inside a period: this many is what the host lets through now (at
                # most halving at once: with a window taken too short, a sliding window
                # refuses early in a period, and one refusal is not to cut the pace to a
                # trickle).
                burst = max(let_through, burst // 2)
            elif recovery <= t.sporadic_floors * max(self.policy.min_sleep, 1.0):
                if not self._sporadic_again(mono, wall, window):
                    # Refused at a period's first request and soon over: a sporadic refusal
                    # (the host's load, another client) or a small drift; it says nothing of
                    # the window by itself (but may, with the window starts before it, show
                    # the host's lattice: see below).
                    sporadic = True
                # Such refusals again and again: the windows are too short by about that much.
                else:
                    self._grown = (window, self._since_sporadic)
                    self._since_sporadic = 0
                    window += recovery
            else:
                # The window that let the previous period through ended only now.
                previous = max(0, episode.period - 1) * window
                grown = min(window + recovery, episode.span + recovery - previous)
                window = max(window, grown)
        # How far a window measured by this episode may be off, either way (for _aligned):
        # anywhere back to the last refusal (or to the start of an obeyed header's last
        # second). A window kept as it was is taken as it is.
        early = late = 0.0
        if limit is None or window != limit.window:
            early, late = recovery - low, high - recovery
            if episode.fails == 1 and episode.ready_at is not None:
                early = min(early, 1.0)
        # A window longer than one sleep may last is a hold's business, not pacing's: such a
        # cycle comes from long waits (a maintenance, an unreliable header), not a window.
        window = min(window, self.policy.max_sleep)
        # Only the end of an obeyed wait, with no refusal after it, marks the start of a
        # host's window exactly (our own backoff only overshoots it).
        anchor = wall if episode.fails == 1 and episode.ready_at is not None else None
        cycle = None
        if self._recovered is not None:
            # From the previous window start to this one: between the latest the previous
            # can be and the earliest this one can be, and the other way round; over as many
            # windows as the budget learned before went into the cycle's successes.
            before, after = self._recovered
            windows = max(1, round(episode.served / limit.burst)) if limit and limit.burst else 1
            cycle = ((wall - high + low - after) / windows, (wall - before) / windows)
        aligned = self._aligned(window, window - early, window + late, obs, wall, cycle)
        if sporadic and (aligned is None or limit is None or aligned[0] == limit.window):
            return  # nothing learned
        if aligned is not None:
            window, anchor = aligned[0], aligned[1] if aligned[1] is not None else anchor
        documented = None if limit is None else limit.documented
        self._set_limit(
            LimitEstimate(
                burst / window,
                window,
                documented,
                wall,
                "observed",
                burst,
                anchor=anchor,
                by=self.worker,
                even=even,
            ),
            wall,
        )

    def _sporadic_again(self, mono: float, wall: float, window: float) -> bool:
        """Whether a short refusal at a period's start is one of many that a slower pace
        would avoid (and so the window is to grow), rather than sporadic.

        Refusals within ``probe_after_periods`` windows of each other are not sporadic. But if
        the window grew for them and they keep coming as often per request, the pace is not
        their cause (the host's load is): the window is put back and such refusals are taken
        as sporadic for a long while (``probe_max_periods`` windows)."""
        t = self.tuning
        again = mono - self._last_sporadic <= t.probe_after_periods * window
        self._last_sporadic = mono
        if not again or mono < self._load_until:
            self._since_sporadic = 0
            return False
        grown, self._grown = self._grown, None
        if grown is not None and self._since_sporadic <= t.sporadic_repeat * grown[1]:
            self._load_until = mono + t.probe_max_periods * window
            self._since_sporadic = 0
            limit = self.state.limit
            if limit is not None and limit.burst:
                self._set_limit(
                    _replace_limit(limit, window=grown[0], rate=limit.burst / grown[0]), wall
                )
            return False
        return True

    def _bucket_shown(self, episode: Episode, limit: LimitEstimate, recovery: float) -> bool:
        """Whether a refused probe shows a token bucket (see :meth:`_learn_limit`)."""
        t = self.tuning
        if not episode.probe or not limit.window or limit.window >= t.spread_below:
            return False
        if recovery > t.sporadic_floors * max(self.policy.min_sleep, 1.0) or episode.fails > 1:
            return False
        old = self.budget(limit)
        return old is not None and episode.period_served >= old[0]

    def _aligned(
        self,
        window: float,
        shortest: float,
        longest: float,
        obs: Observation,
        wall: float,
        cycle: Optional[Tuple[float, float]] = None,
    ) -> Optional[Tuple[float, Optional[float]]]:
        """``(period, a window start)`` when the host's windows are a fixed lattice (the
        start ``None`` when the lattice may be of our own making, see below).

        A period of ``Tuning.round_periods`` must fit the learned ``window``: within
        ``round_tolerance`` of it, or twice that where this episode's evidence allows
        (anywhere from ``shortest`` to ``longest``), or lie in ``cycle``, the range the time
        from the previous recovery to this one allows (from the earliest to the latest the
        two window starts can be); and the window starts located by the recent episodes (this
        one included) must all fit one lattice of that period: two of them at least for a
        period that only ``cycle`` allows. The start returned is the latest the evidence
        allows (a period begun late loses a little; one begun early is refused).
        """
        t = self.tuning
        tolerance = t.round_tolerance * window
        near = [
            r
            for r in t.round_periods
            if abs(r - window) <= tolerance
            or (shortest <= r <= longest and abs(r - window) <= 2 * tolerance)
        ]
        spanned = [r for r in t.round_periods if cycle and cycle[0] <= r <= cycle[1]]
        for period in sorted(set(near) | set(spanned), key=lambda r: abs(r - window)):
            if period < self.policy.min_sleep:
                continue
            found = self._on_lattice(period, obs, wall, 1 if period in near else 2)
            if found is not None:
                return found
        return None

    def _on_lattice(
        self, period: float, obs: Observation, wall: float, least: int
    ) -> Optional[Tuple[float, Optional[float]]]:
        """``(period, a window start)`` if at least ``least`` located window starts of the
        recent episodes fit one lattice of ``period`` and none is off it (see _aligned)."""
        t = self.tuning
        low, high = -period, period  # the lattice's phase, relative to this recovery
        located = 0
        recent = (*self.state.observations[-self.policy.window :], obs)
        for o in recent:
            bracket = _window_start(o, self.policy.plausible_wait)
            if bracket is None or bracket[1] - bracket[0] > t.bracket_share * period:
                continue
            # Shift the bracket by whole periods to lie about this recovery.
            shift = round((wall - bracket[1]) / period) * period
            low, high = max(low, bracket[0] + shift - wall), min(high, bracket[1] + shift - wall)
            located += 1
            if low >= high:
                return None  # two window starts off the lattice: not a fixed lattice
        if located < least:
            return None
        # Our own bursts, sent at each recovery, put a sliding window's starts on a lattice
        # too, but one of our making: tomorrow's run starts elsewhere. The lattice is the
        # host's own (a clock minute) only if a window start came sooner after our last
        # recovery than a whole window (a run's first, partial window shows it).
        previous = self.state.limit
        hosts = any(
            o.recovered is not None and o.served and o.span + o.recovered <= t.host_lattice * period
            for o in recent
        )
        kept = previous is not None and previous.anchor is not None and previous.window == period
        return period, (wall + high if hosts or kept else None)

    def _set_limit(self, limit: LimitEstimate, wall: float) -> None:
        history = (*self.state.limit_history, (wall, round(limit.rate, 6)))[-MAX_LIMIT_HISTORY:]
        self.state = self.state.replace(limit=limit, limit_history=history, updated_at=wall)
        self.dirty = True
        log.debug("%s: limit now %.3f requests/s (%s)", self.host, limit.rate, limit.source)


def _window_start(o: Observation, plausible_wait: float) -> Optional[Tuple[float, float]]:
    """Where a rate-limit episode located a window start: ``(after, no later than)``, epoch s."""
    if o.recovered is None or o.status not in (429, 503):
        return None
    if o.status == 503 and o.recovered > plausible_wait:
        return None  # a maintenance, not a window
    after = o.at + o.failed_until
    if not o.failed_until and o.header is not None and o.recovered <= o.header + 1.0:
        # A header obeyed with no refusal after it: the window started within the second
        # before the end of the wait (headers count whole seconds).
        after = o.at + o.recovered - 1.0
    return after, o.at + o.recovered


def _between(low: int, high: int) -> int:
    """The geometric middle of two budgets, at least one more than ``low``."""
    return max(low + 1, round(math.sqrt(low * high)))


def _replace_limit(limit: LimitEstimate, **changes: Any) -> LimitEstimate:
    return dataclasses.replace(limit, **changes)
