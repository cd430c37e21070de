"""A rejection episode: what a host did from a 429/503 until it next answered 2xx.

It records the refusals (how many, the last one, whether an obeyed header's wait was missed),
whether successive headers counted down to one reset or pointed at reset moments far apart,
and what the host had let through before; when it ends it becomes an
:class:`~requests_retryafter.state.Observation`, the evidence the host is judged and its
window learned from.
"""

from __future__ import annotations

import statistics
from typing import List, Optional, Tuple

from .decisions import Decision, Event
from .parsing import ParsedRetryAfter
from .state import Observation
from .tuning import TUNING, Tuning

__all__ = ["Episode"]


class Episode:
    """A rejection episode in progress (in memory only): from a 429/503 until the host next
    answers 2xx."""

    __slots__ = (
        "agreed",
        "countdown",
        "fails",
        "first_header",
        "form",
        "jumps",
        "last_fail_mono",
        "misses",
        "mixed",
        "opening",
        "period",
        "period_from_recovery",
        "period_served",
        "probe",
        "ready_at",
        "ready_at_floor",
        "recovered_at",
        "ref_header",
        "ref_wall",
        "resets",
        "served",
        "shorter",
        "span",
        "start_mono",
        "start_wall",
        "status",
        "tried",
        "tuning",
        "turn_served",
        "turn_span",
    )

    def __init__(
        self,
        status: int,
        parsed: ParsedRetryAfter,
        mono: float,
        wall: float,
        served: int,
        span: float,
        tuning: Tuning = TUNING,
    ) -> None:
        self.tuning = tuning
        self.status = status
        self.first_header = parsed.seconds
        #: The header countdowns are judged against, and when it came.
        self.ref_header = parsed.seconds
        self.ref_wall = wall
        #: How often the header pointed at another reset than the reference's.
        self.jumps = 0
        self.form = parsed.form
        self.start_mono = mono
        self.start_wall = wall
        self.last_fail_mono = mono
        self.fails = 1
        self.countdown: Optional[bool] = None
        #: How many headers agreed with the reference's reset, counting down to it.
        self.agreed = 0
        self.served = served
        self.span = span
        #: What the host let through since it last turned (its last recovery not over at
        #: the first retry: see :meth:`soon_over`, or its first success), and over how long:
        #: a window misread from refusals soon over is learned again from these.
        self.turn_served = served
        self.turn_span = span
        #: The pacer's period in which the rejection came, and what it let through before.
        self.period: Optional[int] = None
        self.period_served = 0
        #: Whether that period was the first counted from a recovery from a rate limit in
        #: this run (not on a lattice located on the clock): a window's start.
        self.period_from_recovery = False
        #: Whether a larger limit was being probed when the episode began, and the window
        #: probed if the probe was of a shorter window.
        self.probe = False
        self.shorter: Optional[float] = None
        #: Whether the refusal answered a try on a host whose statements pace it (a reset
        #: predicted from its answers, or an even pace on trial: see
        #: ``StatedLimits.trying``): it says only that the try failed. So does one of a
        #: request that went beside others there (threads outrunning the statements).
        self.tried = False
        #: Whether the refusal was the run's opening's (see :mod:`._opening`): the host's
        #: window still shut by the opening's burst, not a refusal of the pace.
        self.opening = False
        #: Where the host's last recovery from a rate limit before this episode put a window
        #: start: between its last refusal and the recovery (monotonic). The host's next
        #: windows may start a round period on.
        self.recovered_at: Optional[Tuple[float, float]] = None
        #: Whether another status or a hold came into the episode (it then says nothing
        #: about the rate limit's window).
        self.mixed = False
        #: When an obeyed header said the host would be ready (monotonic), and how often
        #: the host refused after that all the same.
        self.ready_at: Optional[float] = None
        self.misses = 0
        #: Whether that obeyed wait was no longer than the floor: the floor would have waited
        #: so long anyway, so a recovery at its end says no more than one at own backoff's
        #: first retry (a bucket refilling in 0.2 s says ``Retry-After: 1``).
        self.ready_at_floor = False
        #: ``(header, the reset moment it implies)`` for each positive header seen.
        self.resets: List[Tuple[float, float]] = []
        if parsed.seconds is not None and parsed.seconds >= 1.0:
            self.resets.append((parsed.seconds, wall + parsed.seconds))

    def decided(
        self, decision: Decision, header: Optional[float], mono: float, floor: float
    ) -> None:
        """The wait ``decision`` taken at ``mono`` on a refusal whose header said ``header``
        seconds: an obeyed one (``Decision.trusted``) says when the host will be ready, and
        whether that is no longer than the ``floor`` (``Policy.min_sleep``); a hold mixes
        the episode."""
        self.ready_at = mono + decision.wait if decision.trusted else None
        self.ready_at_floor = decision.trusted and header is not None and header <= floor
        if decision.event == Event.HOLD:
            self.mixed = True

    def let_through(self) -> None:
        """A request that went before the episode began got through (another thread's, on
        the wire with the one refused first): the host let it through before it refused,
        in the period and the cycle the refusal ended."""
        self.served += 1
        self.turn_served += 1
        self.period_served += 1

    def _far_apart(self) -> bool:
        """Whether the headers seen vary and point at reset moments more than
        ``Tuning.scattered_spread`` seconds apart (or ``scattered_share`` of their median, if
        that is more: less is the rounding of a countdown)."""
        t = self.tuning
        values = [v for v, _ in self.resets]
        if max(values) <= t.constant_spread * min(values):
            return False  # a constant header: its own kind of lie, judged elsewhere
        moments = [m for _, m in self.resets]
        spread = max(t.scattered_spread, t.scattered_share * statistics.median(values))
        return max(moments) - min(moments) > spread

    @property
    def after_recovery(self) -> bool:
        """Whether the host refused partway through the first period after a recovery, outside
        a probe: the sign of a sliding window counter, which still counts the window before
        (see ``LimitLearner._learn`` and ``Decider._own_backoff``)."""
        return self.period_served > 0 and self.period_from_recovery and not self.probe

    @property
    def scattered(self) -> bool:
        """Whether enough varying headers pointed at reset moments far apart
        (``Tuning.scattered_headers``)."""
        return len(self.resets) >= self.tuning.scattered_headers and self._far_apart()

    @property
    def contradicted(self) -> bool:
        """Whether the host still refused when an obeyed header said it would be ready, and
        its headers vary and point at moments far apart (as scattered ones do), or it did
        so ``Tuning.missed_headers`` times: the header was shown wrong in this very
        episode, so what it says next is a hint until something corroborates it. (A header
        rounded down and missed by a second points at about the same moment again, and is
        right the next time; one that says the same again once may be a window shared with
        other clients. Missed again, it is a constant lie: a ``Retry-After: 1`` obeyed
        each second for a minute's window.)"""
        if self.misses >= self.tuning.missed_headers:
            return True
        return bool(self.misses) and len(self.resets) >= 2 and self._far_apart()

    def observation(self, recovered: Optional[float]) -> Observation:
        """The episode as evidence, ``recovered`` seconds after it began (``None``: never)."""
        return Observation(
            at=self.start_wall,
            status=self.status,
            header=self.first_header,
            form=self.form,
            recovered=None if recovered is None else round(recovered, 3),
            failed_until=round(self.last_fail_mono - self.start_mono, 3),
            countdown=self.countdown,
            served=self.served,
            span=round(self.span, 3),
            misses=self.misses,
            scattered=self.scattered,
        )

    def follow(self, status: int, parsed: ParsedRetryAfter, mono: float, wall: float) -> None:
        """Another rejection in the episode: count it, and judge whether the header counts
        down to one reset."""
        self.fails += 1
        self.last_fail_mono = mono
        if self.ready_at is not None and mono >= self.ready_at:
            self.misses += 1
        if status != self.status:
            self.mixed = True
        # Against the episode's reference header (its first, or the first after the header
        # jumped to another reset: a maintenance after a window): did the header count down
        # by the time that passed (to the same reset, within the rounding of whole seconds),
        # or stay put?
        t = self.tuning
        first, since = self.ref_header, self.ref_wall
        if parsed.seconds is not None and first is not None:
            implied_now, implied_first = wall + parsed.seconds, since + first
            same_reset = abs(implied_now - implied_first) <= t.countdown_tolerance
            if wall - since >= t.countdown_probe:
                if parsed.seconds < first and same_reset and self.jumps < 2:
                    self.countdown = True
                    self.agreed += 1
                elif abs(parsed.seconds - first) <= 1.0 and self.countdown is None:
                    self.countdown = False  # within 1 s, the rounding: it stayed put
            if not same_reset and abs(parsed.seconds - first) > t.countdown_tolerance:
                # Another reset than the reference's (a maintenance after a window's 429, a
                # reset moved): judged afresh from here. Headers that point at a third
                # moment are no countdown in this episode: two random values agree by
                # chance once in forty, and a run sees many.
                self.ref_header, self.ref_wall, self.countdown = parsed.seconds, wall, None
                self.agreed = 0
                self.jumps += 1
        elif parsed.seconds is not None:
            self.ref_header, self.ref_wall = parsed.seconds, wall
        if parsed.seconds is not None and parsed.seconds >= 1.0:
            self.resets.append((parsed.seconds, wall + parsed.seconds))

    def soon_over(self, mono: float, floor: float) -> bool:
        """Whether the episode, ended at ``mono``, was over by own backoff's first retry at
        the ``floor`` (within ``Tuning.sporadic_floors`` floors, no header obeyed): the host
        may have refused at random, and no window of its limit is shown to have turned."""
        return (
            self.fails == 1
            and self.ready_at is None
            and mono - self.start_mono <= self.tuning.sporadic_floors * max(floor, 1.0)
        )

    def turned(self, mono: float, plausible_wait: float, floor: float) -> bool:
        """Whether the host's window turned when the episode ended at ``mono``: unless it
        was a rate limit over by the first retry at the ``floor`` (:meth:`rate_limited`,
        :meth:`soon_over`), which may have been a refusal at random. The cycles counted
        since the host last turned start afresh from it."""
        return not (self.rate_limited(mono, plausible_wait) and self.soon_over(mono, floor))

    def rate_limited(self, mono: float, plausible_wait: float) -> bool:
        """Whether the episode, just ended at ``mono``, was a rate limit (and so marks a
        window): a 429, or a 503 over within ``plausible_wait`` (servers such as nginx's
        ``limit_req`` answer 503); not a hold, a maintenance or a mix of statuses."""
        if self.mixed:
            return False
        if self.status == 429:
            return True
        return self.status == 503 and mono - self.start_mono <= plausible_wait
