"""``ServerClock``: a host's clock, as the ``Date`` of its answers shows it, read only where
it is shown off from this machine's."""

from __future__ import annotations

from email.utils import formatdate
from typing import Dict

import pytest

from requests_retryafter._server_clock import ServerClock
from requests_retryafter.parsing import date_offset
from requests_retryafter.tuning import TUNING

WALL = 1_700_000_000.0


def dated(host_time: float) -> Dict[str, str]:
    """Headers of an answer stamped at ``host_time`` on the host's clock (truncated to a
    whole second, as a ``Date`` is)."""
    return {"Date": formatdate(host_time, usegmt=True)}


def crawl(skew: float, way: float = 0.01, answers: int = 40) -> float:
    """``answers`` answers of a host whose clock is ``skew`` s off, stamped halfway along a
    round trip of ``2 * way`` s, at moments spread over a second's fractions; the host's
    time as read at the last answer, less this machine's."""
    clock = ServerClock(TUNING)
    now = WALL
    for i in range(answers):
        sent = WALL + i * 1.37
        now = clock.now(dated(sent + way + skew), sent + 2 * way, sent)
    return now - (WALL + (answers - 1) * 1.37 + 2 * way)


@pytest.mark.parametrize("skew", [30.0, 2.5, -2.5, -30.0, -3600.0])
def test_a_clock_shown_off_is_read_late_never_early(skew):
    # The host's time is read at most the way here (and the truncation) short of its clock:
    # resets it states are read late by that, never early.
    read = crawl(skew)
    assert skew - 0.05 <= read <= skew


@pytest.mark.parametrize("skew", [0.0, 0.5, -0.5])
def test_a_clock_that_may_be_in_step_is_read_as_this_machines(skew):
    assert crawl(skew) == 0.0


def test_slow_answers_of_a_clock_in_step_are_no_clock_behind():
    # Answers 3 s on their way: each Date reads 3 s behind when it comes, but it was
    # stamped after the request went: the host's clock may be in step.
    assert crawl(0.0, way=1.5) == 0.0
    # The same host 10 s behind is shown behind, and read late by the way here at most.
    assert -10.0 - 3.0 <= crawl(-10.0, way=1.5) <= -10.0


def test_an_answer_without_a_readable_date_leaves_this_machines_clock():
    clock = ServerClock(TUNING)
    assert clock.now({}, WALL) == WALL
    assert clock.now({"Date": "yesterday"}, WALL, WALL) == WALL
    assert clock.now({"Date": "x" * 100}, WALL, WALL) == WALL
    # Unknown when the request went: a Date behind proves nothing; one ahead does.
    assert clock.now(dated(WALL - 60), WALL) == WALL
    assert clock.now(dated(WALL + 60), WALL) == WALL + 60


def test_a_clock_set_right_is_read_in_step_within_the_answers_kept():
    clock = ServerClock(TUNING)
    for i in range(5):
        clock.now(dated(WALL + i + 30), WALL + i, WALL + i)
    assert clock.now(dated(WALL + 5 + 30), WALL + 5, WALL + 5) == WALL + 5 + 30
    for i in range(6, 6 + TUNING.date_answers):
        last = clock.now(dated(WALL + i), WALL + i + 0.01, WALL + i)
    assert last == WALL + 6 + TUNING.date_answers - 1 + 0.01


def test_an_answer_a_cache_kept_is_read_as_of_when_the_cache_answered():
    # A cache's answer, stamped an hour ago by the host, 3600 s old by its Age: the host's
    # clock is in step; its epoch resets are the hour-old statements they are.
    clock = ServerClock(TUNING)
    for i in range(3):
        kept = {**dated(WALL + i - 3600), "Age": "3600"}
        assert clock.now(kept, WALL + i + 0.01, WALL + i) == WALL + i + 0.01
    # An Age explains a Date behind, and makes none read ahead.
    assert date_offset({**dated(WALL - 10), "Age": "3600"}, WALL) == 0.0
    assert date_offset({**dated(WALL + 60), "Age": "5"}, WALL) == 60.0
    assert date_offset({**dated(WALL - 10), "Age": "soon"}, WALL) == -10.0


def test_date_offset_reads_the_date_field():
    assert date_offset({"Date": "Tue, 14 Nov 2023 22:13:20 GMT"}, WALL + 0.25) == -0.25
    assert date_offset({"Date": " Tue, 14 Nov 2023 22:13:50 GMT "}, WALL) == 30.0
    assert date_offset({}, WALL) is None
    assert date_offset({"Date": "Tue, 14 Nov 2023 25:13:20 GMT"}, WALL) is None
