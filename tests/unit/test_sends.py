"""The pacer's log of its requests on windows not located on the clock (``_sends.SendLog``):
a request goes no sooner than a window after the budget's worth of requests before it."""

from __future__ import annotations

from requests_retryafter._sends import SendLog

MARGIN = 0.005


def take(log: SendLog, at: float, allowed: int = 3, period: float = 10.0) -> float:
    """When a request the lattice lets go at ``at`` (reserved then) goes."""
    return max(at, log.take(at, at, allowed, period, MARGIN))


def logged(*times: float, allowed: int = 3) -> SendLog:
    """A log of requests that went at ``times``, of a budget of ``allowed`` per 10 s."""
    log = SendLog()
    for at in times:
        take(log, at, allowed)
    return log


def test_a_request_goes_a_window_after_the_budgets_worth_before_it():
    log = SendLog()
    assert [take(log, t) for t in (0.0, 1.0, 2.0)] == [0.0, 1.0, 2.0]
    assert take(log, 3.0) == 10.0 + MARGIN  # a window after the first
    assert take(log, 3.0) == 11.0 + MARGIN  # after the second


def test_a_late_request_holds_up_only_the_one_a_window_after_it():
    # A retry a second late (at 2 s, not 1 s): a window later, the request a budget after
    # it waits for it, the one before does not.
    log = SendLog()
    assert [take(log, t) for t in (0.0, 2.0, 2.1)] == [0.0, 2.0, 2.1]
    assert [take(log, 10.0) for _ in range(3)] == [10.0 + MARGIN, 12.0 + MARGIN, 12.1 + MARGIN]


def test_a_smaller_budget_keeps_the_places_the_first_requests_used():
    log = logged(0.0, 1.0, 2.0, 3.0, allowed=4)
    # Cut to 2: the budget's places are the first two's (0 s and 1 s), not the newest.
    assert take(log, 5.0, allowed=2) == 10.0 + MARGIN
    assert take(log, 5.0, allowed=2) == 11.0 + MARGIN


def test_a_larger_budget_is_bound_only_once_its_worth_went():
    log = logged(0.0, 1.0, 2.0)
    assert take(log, 3.0, allowed=4) == 3.0  # a probe of 4: the log holds only 3
    assert take(log, 4.0, allowed=4) == 10.0 + MARGIN


def test_release_forgets_the_request_last_taken():
    log = logged(0.0, 1.0, 2.0)
    log.release()  # the request at 2 s never went
    assert take(log, 3.0) == 3.0
    assert take(log, 4.0) == 10.0 + MARGIN


def test_a_try_added_outside_the_budget_is_the_latest():
    log = logged(0.0, 0.0, 0.0)
    log.add(0.05, 3)  # the try of a run's first window, through at once
    assert [take(log, 1.0) for _ in range(3)] == [10.0 + MARGIN, 10.0 + MARGIN, 10.05 + MARGIN]
