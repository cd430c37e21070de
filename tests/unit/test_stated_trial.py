"""The trials of an even pace on a host whose statements pace it (requests_retryafter's
``_stated_trial``): when one starts, when it is kept, and what a refusal does."""

from __future__ import annotations

import random

import pytest

from requests_retryafter import HostState, LimitEstimate, Policy
from requests_retryafter._context import HostContext
from requests_retryafter._stated_trial import StatedTrial
from requests_retryafter.tuning import TUNING

UTILIZATION = Policy().utilization
#: Epoch seconds at the monotonic clock's 0 (the trials keep a pace's time as epoch seconds).
WALL = 1_700_000_000.0


def _trial(limit: int = 5, window: float = 1.0, *, opened: bool = True) -> StatedTrial:
    """A trial for a worker alone on a host that states ``limit`` per ``window``; ``opened``:
    past the run's first run-out (the end of the burst a host idle before the run let
    through, which the statements' pace is not measured from), a second before 0."""
    ctx = HostContext(HostState("portal.example"), Policy(), random.Random(0), "w", TUNING)
    ctx.stated = LimitEstimate(limit / window, window, limit / window, 0.0, "stated", burst=limit)
    ctx.counted = True  # its answers state what remains and when it resets
    trial = StatedTrial(ctx)
    if opened:
        trial.ran_out(-1.0, 0.0)
    return trial


def _answer(trial: StatedTrial, at: float) -> None:
    """A 2xx stating what remains, answered at once to a request sent at ``at``."""
    trial.answered(at, at, WALL + at)


def _at_its_pace(trial: StatedTrial, start: float) -> None:
    """30 such 2xx from ``start``, each as the trial's pace (which may step up) has it."""
    for i in range(30):
        _answer(trial, start + i / trial.rate)


def _cycles(trial: StatedTrial, start: float, cycles: int, served: int, length: float) -> float:
    """``cycles`` of a burst of ``served`` 2xx and a run-out, ``length`` s each, from
    ``start``; returns when the last ended (the run-out waits until then)."""
    t = start
    for _ in range(cycles):
        for i in range(served):
            _answer(trial, t + i * 0.01)
        t += length
        trial.ran_out(t - length + served * 0.01, length - served * 0.01)
    return t


def test_a_window_whose_resets_come_a_second_late_is_tried():
    # Windows of 5 a second, each reset stated (and waited for) a second late, as limits'
    # epoch resets can be: each wait frees the whole budget, but the statements give half
    # the rate, and an even pace is tried.
    trial = _trial()
    _cycles(trial, 0.0, TUNING.trial_after, served=5, length=2.0)
    assert trial.rate == pytest.approx(UTILIZATION * 5)


def test_a_host_whose_resets_free_a_place_or_two_is_tried_at_twice_that():
    trial = _trial()
    _cycles(trial, 0.0, 2, served=2, length=1.0)
    assert trial.rate is None  # two run-outs: one cycle, not measured yet
    _cycles(trial, 2.0, 1, served=2, length=1.0)
    assert trial.rate == pytest.approx(4.0)  # twice the 2 a second, under 0.95 of 5


def test_a_pace_that_did_better_steps_up_to_the_stated_rate_and_a_refused_step_goes_back():
    trial = _trial(limit=20)  # 20 a second stated; the statements give 3
    start = _cycles(trial, 0.0, TUNING.trial_after, served=3, length=1.0)
    assert trial.rate == pytest.approx(6.0)
    t = start
    for _ in range(14):  # two seconds at 6 a second: kept, and 12 tried
        _answer(trial, t)
        t += 1 / 6.0
    assert trial.rate == pytest.approx(12.0)
    trial.refused(WALL)  # 12 is too many: back to 6, and the window reads a second longer
    assert trial.rate == pytest.approx(6.0)
    for _ in range(30):  # the next step waits twice as long (4 s), then tries 9.5
        _answer(trial, t)
        t += 1 / 6.0
    assert trial.rate == pytest.approx(UTILIZATION * 10)


def test_statements_that_pace_near_the_stated_rate_are_not_tried():
    # Nine of ten a cycle of a second: an even pace at 0.95 of the rate gains too little.
    trial = _trial(limit=10)
    _cycles(trial, 0.0, 6, served=9, length=1.0)
    assert trial.rate is None


def _tried(trial: StatedTrial) -> float:
    """Run-outs enough to start a trial (2 of 5 a second); returns when it starts."""
    end = _cycles(trial, 0.0, TUNING.trial_after, served=2, length=1.0)
    assert trial.rate is not None
    return end


def test_a_trial_that_did_better_is_kept():
    trial = _trial()
    start = _tried(trial)
    _at_its_pace(trial, start)  # 4.75 a second against 2
    assert trial.rate == pytest.approx(UTILIZATION * 5)


def test_a_trial_that_did_no_better_ends_and_the_next_waits_twice_as_long():
    trial = _trial()
    start = _tried(trial)
    for i in range(10):  # 2.1 a second against 2: the host (or the client) is no faster so
        _answer(trial, start + i / 2.1)
    assert trial.rate is None
    end = _cycles(trial, 10.0, 2 * TUNING.trial_after - 1, served=2, length=1.0)
    assert trial.rate is None
    _cycles(trial, end, 1, served=2, length=1.0)
    assert trial.rate is not None


def test_a_refused_trial_ends_and_takes_the_window_as_a_second_longer():
    trial = _trial(limit=20, window=1.0)  # a window of 2 s on the clock reads as 1 s
    _cycles(trial, 0.0, TUNING.trial_after, served=10, length=1.0)
    assert trial.rate == pytest.approx(UTILIZATION * 20)  # under twice the 10 a second
    trial.refused(WALL)
    assert trial.rate is None
    _cycles(trial, 10.0, 2 * TUNING.trial_after, served=6, length=1.0)
    assert trial.rate == pytest.approx(UTILIZATION * 10)  # 20 per 2 s
    stated = trial.ctx.stated
    assert stated is not None
    assert stated.window == 1.0  # what the statements say is left as read


def test_no_trial_with_other_clients_counted_or_workers_sharing_the_host():
    trial = _trial()
    trial.shared(WALL)
    _cycles(trial, 0.0, 12, served=2, length=1.0)
    assert trial.rate is None
    shared = _trial()
    shared.ctx.share = 2
    _cycles(shared, 0.0, 12, served=2, length=1.0)
    assert shared.rate is None


def test_a_reset_predicted_from_the_answers_is_not_a_run_out_of_the_statements():
    trial = _trial()
    for i in range(10):
        _answer(trial, float(i))
        trial.ran_out(i + 0.5, 0.5, predicted=True)
    assert trial.rate is None


def test_a_client_that_comes_back_late_from_the_waits_is_not_tried():
    # Bursts of two after pauses longer than the waits: the client was not held back by
    # the statements, and an even pace would only spread its bursts.
    trial = _trial()
    t = 0.0
    for _ in range(12):
        _answer(trial, t)
        _answer(trial, t + 0.01)
        trial.ran_out(t + 0.01, 0.99)
        t += 3.0  # back 2 s after the wait ended
    assert trial.rate is None


def test_no_trial_for_an_adapter_that_does_not_pace():
    ctx = HostContext(
        HostState("portal.example"), Policy(pace=False), random.Random(0), "w", TUNING
    )
    ctx.stated = LimitEstimate(5.0, 1.0, 5.0, 0.0, "stated", burst=5)
    trial = StatedTrial(ctx)
    _cycles(trial, 0.0, 12, served=2, length=1.0)
    assert trial.rate is None
    assert trial.pace() is None


def test_refused_steps_lower_their_ceiling_until_none_is_worth_trying():
    # Another client shares a window of 5 a second, and each step is refused: 5 per 1 s,
    # per 2 s, per 3 s. At 5 per 3 s (1.6 a second at 0.95) no step beats the 2 a second
    # the statements give.
    trial = _trial()
    t = _cycles(trial, 0.0, TUNING.trial_after, served=2, length=1.0)
    tried = []
    while trial.rate is not None:
        tried.append(round(trial.rate, 3))
        trial.refused(WALL)
        t = _cycles(trial, t, 64, served=2, length=1.0)
    assert tried == [4.0, round(UTILIZATION * 2.5, 3)]
    # A refusal while workers share the host (no even pace in force) says nothing of it.
    shared = _trial()
    _cycles(shared, 0.0, TUNING.trial_after, served=2, length=1.0)
    shared.ctx.share = 2
    shared.refused(WALL)
    shared.ctx.share = 1
    assert shared.rate == pytest.approx(4.0)


def _next_run(trial: StatedTrial) -> StatedTrial:
    """The trials of the next run, from the state this one leaves in the store."""
    stored = HostState.from_json(trial.ctx.state.to_json())
    ctx = HostContext(stored, Policy(), random.Random(1), "w2", TUNING)
    ctx.stated, ctx.counted = trial.ctx.stated, True  # (as from the run's first answer)
    return StatedTrial(ctx)


def test_a_kept_pace_is_stored_and_the_next_run_starts_from_it():
    trial = _trial()
    start = _tried(trial)
    assert trial.ctx.state.even_pace is None  # on trial, not kept yet
    for i in range(10):  # its step's 2 s at 4 a second: kept, and the next step on trial
        _answer(trial, start + i / 4.0)
    assert trial.rate == pytest.approx(UTILIZATION * 5)
    assert trial.ctx.dirty
    kept = trial.ctx.state.even_pace
    assert kept == pytest.approx((4.0, 2.0))  # twice the 2 a second, over the 2 s measured
    after = _next_run(trial)
    assert after.pace() == pytest.approx(4.0)  # from its first request, no run-outs first
    assert after.reserve(0.0) == 0.0
    assert after.reserve(0.0) == pytest.approx(0.25)
    t = 0.5
    while t < 0.5 + kept[1] + 2.0:  # its step comes after a step's span, as in that run
        _answer(after, t)
        t += 0.25
    assert after.rate == pytest.approx(UTILIZATION * 5)


def test_a_stored_pace_refused_is_dropped_and_the_run_goes_on_as_a_fresh_one():
    trial = _trial()
    start = _tried(trial)
    _at_its_pace(trial, start)
    after = _next_run(trial)
    assert after.pace() is not None
    # Refused before this run stepped from it: the host changed, or the last run's requests
    # (or another client's) still count in its window. No fault of the pace's is known.
    after.refused(wall=2_000.0)
    assert after.pace() is None
    assert after.ctx.state.even_pace is None
    assert after.ctx.state.even_pace_at == 2_000.0  # (a merge takes the pace set last)
    assert _next_run(after).pace() is None
    # Nothing is counted against the host: the next trial comes after as many run-outs,
    # and tries as high, as in a fresh run (whose first run-out is not counted).
    _cycles(after, 10.0, TUNING.trial_after, served=2, length=1.0)
    assert after.pace() is None
    _cycles(after, 10.0 + TUNING.trial_after, 1, served=2, length=1.0)
    assert after.pace() == pytest.approx(4.0)


def test_the_runs_first_run_out_is_not_counted():
    # A counter of 60 a minute, idle before the run: the run's first 60 requests go at once,
    # and the wait for the first reset stated is for the next window's start, where a place
    # frees each second. Counted from there, the statements gave 2 requests over 55 s, and
    # the even pace tried from that, twice 0.036 a second, doubled each 55 s: 200 requests
    # took up to twice the ideal. From the run's second run-out: 1 a second, as it is.
    def opening_then_one_a_second(trial: StatedTrial) -> None:
        for i in range(60):
            _answer(trial, i * 0.001)
        trial.ran_out(0.06, 53.7)
        t = 53.8
        for _ in range(TUNING.trial_after - 1):
            _answer(trial, t)
            trial.ran_out(t, 1.0)
            t += 1.0
        assert trial.rate is None  # the run's first and two more: not measured yet
        _answer(trial, t)
        trial.ran_out(t, 1.0)

    trial = _trial(limit=60, window=60.0, opened=False)
    opening_then_one_a_second(trial)
    assert trial.rate is None  # measured at 1 a second: nothing to gain under 0.95 of 1
    assert trial.ctx.stated is not None
    assert UTILIZATION * trial.ctx.stated.rate < TUNING.trial_gain * 1.0
    # Where the host states more (60 per 20 s), the step tried is twice the 1 a second
    # measured (counted from the run's first run-out, twice 0.036 a second).
    stating_more = _trial(limit=60, window=20.0, opened=False)
    opening_then_one_a_second(stating_more)
    assert stating_more.rate == pytest.approx(2.0)


def test_a_stored_pace_faster_than_the_statements_allow_now_is_brought_under_them():
    trial = _trial(limit=10)
    trial.ctx.state = trial.ctx.state.replace(even_pace=(9.5, 2.0))
    after = _next_run(trial)
    after.ctx.stated = LimitEstimate(5.0, 1.0, 5.0, 0.0, "stated", burst=5)  # halved since
    assert after.pace() == pytest.approx(9.5)  # (before any answer of this run)
    after.answered(0.1, 0.0, wall=1_000.0)
    assert after.pace() == pytest.approx(UTILIZATION * 5)
    assert after.ctx.state.even_pace == pytest.approx((UTILIZATION * 5, 2.0))


def test_a_stored_pace_is_not_used_by_workers_sharing_the_host():
    trial = _trial()
    start = _tried(trial)
    _at_its_pace(trial, start)
    after = _next_run(trial)
    assert after.pace() is not None
    after.ctx.share = 2
    assert after.pace() is None
    assert after.reserve(0.0) is None


def test_a_stored_pace_waits_for_this_runs_statements():
    trial = _trial()
    trial.ctx.state = trial.ctx.state.replace(even_pace=(4.0, 2.0))
    ctx = HostContext(trial.ctx.state, Policy(), random.Random(1), "w2", TUNING)
    after = StatedTrial(ctx)
    assert after.pace() is None  # nothing stated yet in this run: its first request goes
    after.refused(wall=1_000.0)  # (a refusal then says nothing of the pace)
    assert ctx.state.even_pace == (4.0, 2.0)
    ctx.stated = trial.ctx.stated
    ctx.counted = True  # an answer stated what remains, and the limit
    after.answered(1.0, 0.9, wall=1_001.0)
    assert after.pace() == pytest.approx(4.0)
    assert after.reserve(1.0) == pytest.approx(0.15)  # a gap after the request answered
    ctx.counted = False  # its answers stopped stating what remains: nothing to pace by
    assert after.pace() is None


def test_a_merge_takes_the_pace_set_last():
    kept = HostState("h", updated_at=100.0, even_pace=(4.0, 2.0), even_pace_at=90.0)
    dropped = HostState("h", updated_at=50.0, even_pace=None, even_pace_at=95.0)
    assert kept.merge(dropped).even_pace is None  # dropped last, by an older entry
    assert dropped.merge(kept).even_pace is None
    again = HostState("h", updated_at=10.0, even_pace=(4.5, 2.0), even_pace_at=99.0)
    assert kept.merge(again).even_pace == (4.5, 2.0)
