"""``judge``: the five categories of DOMAIN.md from observations, as tables."""

from __future__ import annotations

from typing import List, Optional

import pytest

from requests_retryafter import CATEGORIES, Observation, judge
from requests_retryafter.categories import (
    ABSENT,
    ALWAYS_ZERO,
    CONSTANT_OVERSTATED,
    TRUTHFUL,
    UNKNOWN,
    UNRELIABLE,
    recovery_ratio,
)


def ep(
    header: Optional[float],
    recovered: Optional[float],
    *,
    failed_until: float = 0.0,
    countdown: Optional[bool] = None,
    at: float = 0.0,
) -> Observation:
    return Observation(
        at=at,
        status=429,
        header=header,
        recovered=recovered,
        failed_until=failed_until,
        countdown=countdown,
    )


def series(*eps: Observation) -> List[Observation]:
    """Give each observation its own episode start, in order."""
    return [Observation(**{**o.to_dict(), "at": 1000.0 * i}) for i, o in enumerate(eps)]


def test_category_names_are_the_stored_ones():
    assert {UNKNOWN, TRUTHFUL, ALWAYS_ZERO, CONSTANT_OVERSTATED, UNRELIABLE, ABSENT} == set(
        CATEGORIES
    )


CASES = [
    # (name, observations, previous, expected)
    ("nothing yet", [], UNKNOWN, UNKNOWN),
    ("nothing yet keeps previous", [], TRUTHFUL, TRUTHFUL),
    ("truthful once", [ep(20, 20)], UNKNOWN, TRUTHFUL),
    ("truthful, recovery a little late", [ep(20, 21.5), ep(20, 20.2)], UNKNOWN, TRUTHFUL),
    ("truthful, header a little long", [ep(20, 12), ep(30, 16)], UNKNOWN, TRUTHFUL),
    ("hourly countdown recovered", [ep(2800, 2800.4), ep(3100, 3100)], UNKNOWN, TRUTHFUL),
    ("countdown seen, not yet recovered", [ep(2800, None, countdown=True)], UNKNOWN, TRUTHFUL),
    ("always zero once", [ep(0, 10, failed_until=8)], UNKNOWN, ALWAYS_ZERO),
    ("always zero (past dates too)", [ep(0, 10), ep(0, 12), ep(0, 9)], TRUTHFUL, ALWAYS_ZERO),
    ("mostly zero", [ep(0, 10), ep(0, 10), ep(0, 10), ep(20, 20)], UNKNOWN, ALWAYS_ZERO),
    ("constant 3600, real 20", [ep(3600, 20, failed_until=14)], UNKNOWN, CONSTANT_OVERSTATED),
    (
        "constant 3600 many times",
        [ep(3600, 21), ep(3600, 19), ep(3600, 24)],
        TRUTHFUL,
        CONSTANT_OVERSTATED,
    ),
    ("constant 120, real 20", [ep(120, 20), ep(120, 22)], UNKNOWN, CONSTANT_OVERSTATED),
    ("varied and overstated", [ep(600, 30), ep(900, 28)], UNKNOWN, UNRELIABLE),
    (
        "over and under",
        [ep(2, 30, failed_until=28), ep(600, 30, failed_until=20)],
        UNKNOWN,
        UNRELIABLE,
    ),
    ("understated", [ep(2, 30, failed_until=28), ep(3, 30, failed_until=27)], UNKNOWN, UNRELIABLE),
    ("absent", [ep(None, 10)], UNKNOWN, ABSENT),
    ("absent, some garbage", [ep(None, 10), ep(None, 12), ep(20, 20)], TRUTHFUL, ABSENT),
    ("no recovery seen yet", [ep(30, None, failed_until=0)], UNKNOWN, UNKNOWN),
    ("no recovery seen keeps previous", [ep(30, None)], ALWAYS_ZERO, ALWAYS_ZERO),
    # small differences are not overstatement: 2 s header, recovered in 0.5 s
    ("tiny header", [ep(2, 0.5), ep(2, 0.4)], UNKNOWN, TRUTHFUL),
]


@pytest.mark.parametrize(
    ("observations", "previous", "expected"),
    [pytest.param(c[1], c[2], c[3], id=c[0]) for c in CASES],
)
def test_judge(observations, previous, expected):
    verdict = judge(series(*observations), previous=previous)
    assert verdict.category == expected
    assert verdict.evidence


def test_large_truthful_countdown_is_not_constant_overstated():
    # The same large header every hour, and the host really needs that long.
    obs = series(*[ep(2800, 2800 + 0.3 * i) for i in range(6)])
    assert judge(obs).category == TRUTHFUL


def test_only_the_window_counts():
    old = [ep(None, 10)] * 8
    new = [ep(20, 20)] * 3
    obs = series(*old, *new)
    assert judge(obs, window=8).category == ABSENT
    assert judge(obs, window=3).category == TRUTHFUL


def test_drift_from_truthful_to_constant_overstated():
    truthful = [ep(20, 20)] * 3
    overstated = [ep(3600, 20, failed_until=15)]
    seen = []
    for n in range(1, 10):
        seen.append(judge(series(*truthful, *overstated * n), previous=TRUTHFUL).category)
    # The change shows within three overstated episodes, and goes straight to what the host
    # now is: the header has been constant since it began to overstate.
    assert seen.index(CONSTANT_OVERSTATED) <= 2
    assert set(seen[3:]) == {CONSTANT_OVERSTATED}
    assert UNRELIABLE not in seen


def test_evidence_states_the_numbers():
    verdict = judge(series(ep(0, 10, failed_until=8), ep(0, 10)))
    assert "0" in verdict.evidence
    assert "10 s" in verdict.evidence
    verdict = judge(series(ep(3600, 20)))
    assert "3600" in verdict.evidence
    assert "20" in verdict.evidence


def test_recovery_ratio():
    assert recovery_ratio([]) is None
    assert recovery_ratio([ep(None, 10), ep(0, 10)]) is None
    assert recovery_ratio(series(ep(20, 20), ep(10, 30), ep(3600, 36))) == pytest.approx(1.0)
    assert judge(series(ep(3600, 36))).ratio == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("observations", "wording"),
    [
        ([Observation(at=1.0, status=429, header=5.0, recovered=5.0)], "1 recovery matched"),
        ([Observation(at=1.0, status=429, header=None)], "the only rejection seen had no usable"),
        (
            [Observation(at=1.0, status=429, header=3600.0, recovered=20.0)],
            "recovered in 20 s or less (once)",
        ),
    ],
)
def test_evidence_reads_as_english_for_one_episode(observations, wording):
    evidence = judge(observations).evidence
    assert wording in evidence
    assert "1 times" not in evidence
    assert "1 recoveries" not in evidence


@pytest.mark.parametrize("header", [0.15, 0.85])
def test_a_date_less_than_a_second_ahead_is_not_a_zero(header):
    # A truthful HTTP-date of a window that ends within the second reads 0.15 or 0.85 s ahead:
    # it claims a wait, and the host recovered at the first retry. Only 0, or a date now or
    # past, claims none.
    assert judge(series(ep(header, 1.0))).category != ALWAYS_ZERO
    assert judge(series(ep(0.0, 1.0))).category == ALWAYS_ZERO
