"""Judging a host's ``Retry-After`` from evidence: the five categories of DOMAIN.md.

The judge compares, per rejection episode, what the header asked for with what the host did:
how long it really took to answer 2xx again (an upper bound of the recovery), the last time it
still refused (a lower bound), and whether a series of headers counted down to one reset time.
It is pure: a tuple of observations in, a verdict out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from .state import Category, Observation

__all__ = [
    "ABSENT",
    "ALWAYS_ZERO",
    "CONSTANT_OVERSTATED",
    "TRUTHFUL",
    "UNKNOWN",
    "UNRELIABLE",
    "Verdict",
    "judge",
    "recovery_ratio",
]

UNKNOWN = Category.UNKNOWN
TRUTHFUL = Category.TRUTHFUL
ALWAYS_ZERO = Category.ALWAYS_ZERO
CONSTANT_OVERSTATED = Category.CONSTANT_OVERSTATED
UNRELIABLE = Category.UNRELIABLE
ABSENT = Category.ABSENT

#: A header is overstated when the host recovered in less than this fraction of it.
OVERSTATED_BELOW = 0.5
#: A header is understated when the host still refused after this multiple of it (plus 1 s).
UNDERSTATED_ABOVE = 1.5
#: Headers whose largest is within this factor of their smallest are "constant".
CONSTANT_SPREAD = 1.1


@dataclass(frozen=True)
class Verdict:
    """The judge's decision.

    Attributes:
        category: the :class:`~requests_retryafter.Category`.
        evidence: one sentence saying what it rests on.
        ratio: the median of (observed recovery / header) over episodes with both, if any.
    """

    category: Category
    evidence: str
    ratio: Optional[float] = None


def _is_over(o: Observation) -> bool:
    return (
        o.header is not None
        and o.recovered is not None
        and o.recovered < OVERSTATED_BELOW * o.header
        and o.header - o.recovered >= 2.0
    )


def _is_under(o: Observation) -> bool:
    return o.header is not None and o.failed_until > UNDERSTATED_ABOVE * o.header + 1.0


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _last(count: int, one: str = "episode", many: str = "episodes") -> str:
    return f"the only {one} seen" if count == 1 else f"the last {count} {many}"


def recovery_ratio(observations: Sequence[Observation]) -> Optional[float]:
    """Median of observed recovery over header value, for episodes with a positive header."""
    ratios = [
        o.recovered / o.header
        for o in observations
        if o.header is not None and o.header >= 1.0 and o.recovered is not None
    ]
    return statistics.median(ratios) if ratios else None


def judge(
    observations: Sequence[Observation], *, previous: str = UNKNOWN, window: int = 8
) -> Verdict:
    """Decide a host's category from its newest ``window`` observations.

    Where the evidence is not enough to decide (for example, every header so far was obeyed,
    which cannot show an overstatement), the ``previous`` category stands.
    """
    stands = Category(previous)
    recent = list(observations)[-window:]
    if not recent:
        return Verdict(stands, "no rejection observed yet")
    ratio = recovery_ratio(recent)
    with_header = [o for o in recent if o.header is not None]
    n = len(recent)
    if len(with_header) * 2 < n:
        return Verdict(
            ABSENT,
            (
                "the only rejection seen"
                if n == 1
                else f"{n - len(with_header)} of the last {n} rejections"
            )
            + " had no usable Retry-After",
            ratio,
        )
    # A header of 0 or a date now or past claims no wait. A date less than a second ahead
    # does claim one (a truthful date of a window ending within the second reads so).
    zeros = [o for o in with_header if o.header is not None and o.header <= 0.0]
    if len(zeros) * 5 >= len(with_header) * 3:
        recovered = [o.recovered for o in zeros if o.recovered is not None]
        seen = f"; real recovery {statistics.median(recovered):.0f} s" if recovered else ""
        return Verdict(
            ALWAYS_ZERO,
            f"{len(zeros)} of {_count(len(with_header), 'header', 'headers')} said 0 (or a past "
            f"date){seen}",
            ratio,
        )
    positive = [o for o in with_header if o.header is not None and o.header >= 1.0]
    over = [o for o in positive if _is_over(o)]
    # Refused when an obeyed header said the host would be ready: once may be chance (another
    # client took the slot); in two episodes or more it is a header that understates.
    missed = [o for o in positive if o.misses]
    under = [o for o in positive if _is_under(o) or o.scattered or (len(missed) > 1 and o.misses)]
    countdown = [o for o in positive if o.countdown]
    # An episode where the host refused after an obeyed header's time is no evidence for the
    # header, even when it is not yet evidence against it.
    consistent = [
        o
        for o in positive
        if o.recovered is not None and not _is_over(o) and not _is_under(o) and not o.misses
    ]
    # Constant since the host began to overstate (a portal that changed from truthful to a
    # constant 3600 is constant from then on).
    first_over = positive.index(over[0]) if over else 0
    values = [o.header for o in positive[first_over:] if o.header is not None]
    constant = bool(values) and max(values) <= CONSTANT_SPREAD * min(values)
    shown = f" (median recovery/header {ratio:.2f})" if ratio is not None else ""
    if over and under:
        return Verdict(
            UNRELIABLE,
            f"header overstated recovery {_times(len(over))} and understated it "
            f"{_times(len(under))} in {_last(n)}{shown}",
            ratio,
        )
    if over and len(over) >= len(consistent) + len(countdown):
        if constant:
            return Verdict(
                CONSTANT_OVERSTATED,
                f"header always {values[-1]:.0f} s but the host recovered in "
                f"{max(o.recovered or 0.0 for o in over):.0f} s or less ({_times(len(over))})"
                + shown,
                ratio,
            )
        return Verdict(
            UNRELIABLE,
            f"header varied and overstated recovery {_times(len(over))} in {_last(n)}{shown}",
            ratio,
        )
    if under and len(under) * 3 >= len(consistent) + len(countdown):
        return Verdict(
            UNRELIABLE,
            f"host still refused well after the header's time {_times(len(under))} "
            f"in {_last(n)}{shown}",
            ratio,
        )
    if countdown or consistent:
        why = []
        if consistent:
            why.append(f"{_count(len(consistent), 'recovery', 'recoveries')} matched the header")
        if countdown:
            episodes = _count(len(countdown), "episode", "episodes")
            why.append(f"{episodes} counted down to a fixed reset time")
        return Verdict(TRUTHFUL, " and ".join(why) + shown, ratio)
    return Verdict(
        stands,
        f"not enough evidence yet ({_count(n, 'rejection', 'rejections')}, none recovered)",
        ratio,
    )
