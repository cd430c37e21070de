"""``HostTracker`` pacing: windows learned from refusals, probes, and shares between workers."""

from __future__ import annotations

import random
from typing import Optional

import pytest

from requests_retryafter import HostState, LimitEstimate, Observation, Policy, judge
from requests_retryafter.engine import HostTracker
from requests_retryafter.parsing import RateLimitInfo, parse_retry_after
from requests_retryafter.testing import FixedWindow, SlidingWindow
from requests_retryafter.tuning import TUNING

WALL = 1_700_000_000.0
NO_INFO = RateLimitInfo()


def tracker(limit: Optional[LimitEstimate] = None, worker: str = "") -> HostTracker:
    return HostTracker(HostState("h", limit=limit), Policy(), random.Random(0), worker)


def refuse(t: HostTracker, at: float, header: Optional[str] = "10"):
    parsed = parse_retry_after(header, now=WALL + at)
    return t.on_rejection(429, parsed, RateLimitInfo(), at, WALL + at, 1)


def test_a_burst_then_a_truthful_wait_teaches_the_window():
    t = tracker()
    for _ in range(40):
        assert t.reserve(0.0, WALL) == 0.0  # nothing learned: no pacing
        t.on_success(0.0, WALL)
    refuse(t, 0.0, "60")
    t.on_success(60.0, WALL + 60)
    assert t.state.limit is not None
    assert (t.state.limit.burst, t.state.limit.window) == (40, 60.0)
    # Paced now: the rest of this window's budget at once, then the next window's start
    # (a margin after it: the obeyed header located the window on the clock).
    waits = [t.reserve(60.0, WALL + 60) for _ in range(40)]
    assert waits[:39] == [0.0] * 39
    assert waits[39] == pytest.approx(60.0 + TUNING.located_margin)


def test_a_probe_is_kept_only_after_a_clean_full_window():
    t = tracker(LimitEstimate(1.0, 10.0, burst=10, anchor=WALL))
    now = 0.0
    # Use the whole budget in every window until the probe starts.
    for window in range(TUNING.probe_after_periods + 1):
        for _ in range(10):
            now = window * 10.0
            t.reserve(now, WALL + now)
            t.on_success(now, WALL + now)
    probing = t.pacer.budget()
    assert probing is not None
    assert probing[0] == 11  # tried in memory...
    assert t.state.limit is not None
    assert t.state.limit.burst == 10  # ...but not stored
    # The probe meets a refusal: it is dropped, and what the window let through is learned.
    refuse(t, now + 10.0, "10")
    assert t.pacer.budget() == (10, 10.0)


def test_workers_split_a_window_by_rank():
    limit = LimitEstimate(1.0, 10.0, burst=10)
    budgets = []
    for me in ("a", "b", "c"):
        t = tracker(limit, worker=me)
        t.state = t.state.replace(workers=(("a", WALL), ("b", WALL), ("c", WALL)))
        t.heartbeat(WALL)
        assert t.share == 3
        budget = t.pacer.budget()
        assert budget is not None
        budgets.append(budget[0])
    assert sorted(budgets) == [3, 3, 4]
    assert sum(budgets) == 10


def _stated_to_four_workers(reset_after: float) -> HostTracker:
    """A worker of four on a host stating ``20`` requests a window and ``reset_after``,
    after answers down to ``remaining=6``, each checked: the worker never waits."""
    names = ["w0", "w1", "w2", "w3"]
    t = tracker(LimitEstimate(4.0, 1.0, burst=4, by="w0"), worker=names[0])
    t.state = t.state.replace(workers=tuple((n, WALL) for n in names))
    t.heartbeat(WALL)
    assert t.share == 4
    now = 0.0
    for remaining in range(15, 5, -1):
        info = RateLimitInfo(limit=20, remaining=remaining, reset_after=reset_after)
        t.on_stated_limit(info, now, WALL + now)
        assert t.reserve(now, WALL + now) == 0.0
        assert t.gate(now, WALL + now) == 0.0
        now += 0.01
    return t


@pytest.mark.parametrize("reset_after", [1.0, 1.7])
def test_workers_on_a_host_that_states_short_windows_send_its_whole_budget_on_the_schedule(
    reset_after,
):
    # A budget learned from one worker's answers is that worker's view (four workers on one
    # limiter of 20 a second learned 4 a second each). The host states its whole budget,
    # and with windows as short as these, the workers send it on their shared schedule. (A
    # reset stated 1.7 s ahead: a window of a second opened 0.3 s into a second, its reset
    # rounded up to the next whole second.)
    t = _stated_to_four_workers(reset_after=reset_after)
    gap = t.pacer.send_gap()
    assert gap is not None
    assert 1 / 20 < gap[0] <= 1 / 10  # the search starts below the stated rate, near it
    # remaining=0: the schedule paces them, not the stated reset (whole seconds, rounded up:
    # waiting for it, each of them lost up to a second of every window).
    t.on_stated_limit(RateLimitInfo(limit=20, remaining=0, reset_after=1.0), 0.1, WALL + 0.1)
    assert t.gate(0.1, WALL + 0.1) == 0.0


def test_workers_on_a_host_that_states_long_windows_are_paced_by_its_statements():
    # With windows of 10 s, each worker sends while its answers say some remain, and waits
    # for the reset stated once none does (neither a learned budget nor the schedule).
    t = _stated_to_four_workers(reset_after=10.0)
    assert t.pacer.send_gap() is None
    t.on_stated_limit(RateLimitInfo(limit=20, remaining=0, reset_after=10.0), 0.1, WALL + 0.1)
    assert t.gate(0.1, WALL + 0.1) > 5.0


def test_workers_leave_the_schedule_once_the_stated_resets_show_a_long_window():
    # The window is the longest the stated resets show: a first one short, a later one of
    # 10 s (an answer counted from a window's first request). Or a window the host states.
    t = _stated_to_four_workers(reset_after=1.0)
    assert t.pacer.send_gap() is not None
    t.on_stated_limit(RateLimitInfo(limit=20, remaining=5, reset_after=10.0), 0.2, WALL + 0.2)
    assert t.pacer.send_gap() is None
    stated = RateLimitInfo(limit=20, remaining=5, reset_after=1.0, window=30.0)
    t = _stated_to_four_workers(reset_after=1.0)
    t.on_stated_limit(stated, 0.2, WALL + 0.2)
    assert t.pacer.send_gap() is None


def test_an_absurd_stated_budget_puts_no_worker_on_the_schedule():
    names = ["w0", "w1", "w2", "w3"]
    t = tracker(LimitEstimate(4.0, 1.0, burst=4, by="w0"), worker=names[0])
    t.state = t.state.replace(workers=tuple((n, WALL) for n in names))
    t.heartbeat(WALL)
    assert t.share == 4
    info = RateLimitInfo(limit=99_999_999_999, remaining=5, reset_after=1.0)
    t.on_stated_limit(info, 0.0, WALL)
    assert t.pacer.send_gap() is None


def test_refusals_after_an_obeyed_header_make_it_unreliable():
    def episode(at: float, misses: int) -> Observation:
        return Observation(at, 429, 20.0, "delta", recovered=45.0, failed_until=20.0, misses=misses)

    assert judge([episode(0, 1)], previous="truthful").category == "truthful"  # once: chance
    verdict = judge([episode(0, 1), episode(100, 1)], previous="truthful")
    assert verdict.category == "unreliable"


def paced_windows(t: HostTracker, windows: int, refuse_every: int) -> None:
    """Use a learned 6-per-second window in full for ``windows`` windows; the first request
    of every ``refuse_every``-th window is refused for a second."""
    now = 0.0
    for second in range(windows):
        now = max(now, float(second))
        if second % refuse_every == refuse_every - 1:
            now += t.reserve(now, WALL + now)
            refuse(t, now, "1")
            now += 1.0
            t.on_success(now, WALL + now)
            served = 1
        else:
            served = 0
        for _ in range(6 - served):
            now += t.reserve(now, WALL + now)
            t.on_success(now, WALL + now)


def test_sporadic_refusals_do_not_grow_the_window():
    t = tracker(LimitEstimate(6.0, 1.0, burst=6, anchor=WALL))
    paced_windows(t, 200, refuse_every=20)  # one refusal in 20 windows: the host's load
    assert t.state.limit is not None
    assert t.state.limit.window == 1.0
    assert t.state.held_until == 0.0


def test_refusals_at_window_starts_again_and_again_grow_the_window():
    # Learned: 6 per second. The host allows 6 in any 1.5 s: every other window's first
    # request is refused for a second. That is the pace's doing, and a slower one ends it.
    host = SlidingWindow(6, 1.5)
    t = tracker(LimitEstimate(6.0, 1.0, burst=6, anchor=WALL))
    now, refused = 0.0, []
    while now < 120.0:
        now += t.reserve(now, WALL + now)
        if host.next_free(now) <= now:
            host.consume(now)
            t.on_success(now, WALL + now)
        else:
            refused.append(now)
            now += refuse(t, now, "1").wait
        now += 0.001
    assert t.state.limit is not None
    assert t.state.limit.window is not None
    assert t.state.limit.window >= 1.5
    assert len([at for at in refused if at > 30.0]) <= 2  # a refused probe now and then
    assert len(refused) >= 2


def test_refusals_whatever_the_pace_do_not_ratchet_the_window():
    # One window in two has its first request refused for a second, however slow the pace
    # (the host's load): the window may grow once to try, then is put back.
    t = tracker(LimitEstimate(6.0, 1.0, burst=6, anchor=WALL))
    paced_windows(t, 400, refuse_every=2)
    assert t.state.limit is not None
    assert t.state.limit.window is not None
    assert t.state.limit.window <= 2.0


def test_a_stated_reset_is_a_hint_when_there_is_no_header():
    t = tracker()
    parsed = parse_retry_after(None, now=WALL)
    d = t.on_rejection(
        429, parsed, RateLimitInfo(limit=60, remaining=0, reset_after=42.0), 0.0, WALL, 1
    )
    assert d.wait == 42.0
    assert not d.trusted
    assert "reset the host states" in d.reason


def test_headers_pointing_at_scattered_resets_are_not_obeyed():
    # Within one episode a truthful host's headers all point at one reset moment; these
    # point at 108, 50 and 147 s.
    t = tracker()
    refuse(t, 0.0, "108")
    obeyed = refuse(t, 1.0, "49")
    assert obeyed.trusted
    after = refuse(t, 50.0, "97")
    assert not after.trusted
    # A hint only: it stretches own backoff (full jitter, 4 s at most now) no more than twice.
    assert 1.0 <= after.wait <= 8.0
    assert "counted up to" in after.reason
    t.on_success(60.0, WALL + 60)
    assert t.state.observations[-1].scattered
    assert t.state.category == "unreliable"


def test_a_small_header_the_host_refused_past_twice_is_a_hint():
    # "Retry-After: 1" on every 429 of a window of a minute: obeyed, the host still refused
    # when it said it would be ready. Once may be a header rounded down; twice, it is wrong,
    # and own backoff's doubling search takes over (obeyed each second, a call used its ten
    # attempts inside the window and gave up).
    t = tracker()
    at, waits = 0.0, []
    for _ in range(8):
        d = refuse(t, at, "1")
        waits.append(d)
        at += d.wait
    assert [d.trusted for d in waits[:2]] == [True, True]
    assert not any(d.trusted for d in waits[2:])
    assert at >= 20.0  # each retry 1.5 to 2 times as far into the episode as the last
    assert "unreliable here" in waits[-1].reason


def test_a_header_missed_once_is_still_obeyed():
    # A header rounded down (1.4 s left reads 1) is missed by a second, then right.
    t = tracker()
    first = refuse(t, 0.0, "20")
    assert first.trusted
    again = refuse(t, 20.0, "1")
    assert again.trusted
    assert again.wait == 1.0


def test_a_truthful_host_that_turns_to_a_constant_is_judged_constant_overstated():
    before = [Observation(i * 100.0, 429, 40.0 + i, "delta", recovered=40.0 + i) for i in range(3)]
    after = [Observation(400.0 + i * 100, 429, 3600.0, "delta", recovered=30.0) for i in range(3)]
    verdict = judge(before + after, previous="truthful")
    assert verdict.category == "constant_overstated"
    assert "3600" in verdict.evidence


def test_a_long_wait_does_not_teach_a_window_longer_than_max_sleep():
    t = tracker()
    for _ in range(10):
        t.on_success(0.0, WALL)
    refuse(t, 0.0, None)
    t.on_success(900.0, WALL + 900)  # after long waits (a maintenance, say)
    assert t.state.limit is not None
    assert t.state.limit.window is not None
    assert t.state.limit.window <= Policy().max_sleep


def test_a_short_503_episode_teaches_a_window_like_a_429():
    # nginx's limit_req answers 503 by default, with no Retry-After.
    t = tracker()
    for _ in range(20):
        t.on_success(0.0, WALL)
    parsed = parse_retry_after(None, now=WALL)
    t.on_rejection(503, parsed, RateLimitInfo(), 0.0, WALL, 1)
    t.on_success(2.0, WALL + 2)
    assert t.state.limit is not None
    assert t.state.limit.burst == 20


def test_a_long_503_episode_is_a_maintenance_not_a_window():
    t = tracker()
    for _ in range(20):
        t.on_success(0.0, WALL)
    parsed = parse_retry_after(None, now=WALL)
    t.on_rejection(503, parsed, RateLimitInfo(), 0.0, WALL, 1)
    t.on_success(600.0, WALL + 600)
    assert t.state.limit is None


# -- windows on the clock's lattice ---------------------------------------------------------------

MINUTE = 1_700_000_040.0  # a whole minute of epoch time


def crawl_minute_window(
    t: HostTracker, start: float, until: float, window: float = 60.0, truthful: bool = True
) -> None:
    """Drive ``t`` against a fixed window of 40 per ``window`` seconds of epoch time (a clock
    minute by default), with a truthful header, from wall time ``start`` (monotonic = wall -
    start) to ``until``: all the requests the pacer allows, each answered as the host would
    (with no ``Retry-After`` unless ``truthful``)."""
    used: dict = {}
    now = start
    while now < until:
        wait = t.reserve(now - start, now)
        now += wait
        if now >= until:
            break
        index = int(now // window)
        if used.get(index, 0) < 40:
            used[index] = used.get(index, 0) + 1
            t.on_success(now - start, now)
            continue
        reset = (index + 1) * window - now
        header = str(int(-(-reset // 1))) if truthful else None
        d = t.on_rejection(429, parse_retry_after(header, now=now), NO_INFO, now - start, now, 1)
        now += d.wait


@pytest.mark.parametrize("truthful", [True, False], ids=["truthful", "no header"])
def test_a_window_on_the_minute_is_learned_exactly_even_from_a_partial_first_one(truthful):
    # The crawl starts 42.4 s into a minute: the first window it sees lasts 17.6 s. Without
    # a header, window starts are only located between a refusal and the next success.
    start = MINUTE + 42.4
    t = tracker()
    crawl_minute_window(t, start, start + 400.0, truthful=truthful)
    limit = t.state.limit
    assert limit is not None
    assert (limit.burst, limit.window) == (40, 60.0)
    assert limit.anchor is not None
    # The stored window start is at or a little after a minute boundary.
    assert 0.0 <= limit.anchor % 60.0 <= (1.0 if truthful else 15.0)


def test_tomorrows_run_starts_in_step_with_the_minute():
    start = MINUTE + 42.4
    t = tracker()
    crawl_minute_window(t, start, start + 200.0)
    # A new tracker on the stored state, a day later, 42 s into a minute again.
    tomorrow = HostTracker(t.state, Policy(), random.Random(1))
    later = start + 86_400.0
    waits = [tomorrow.reserve(0.0, later) for _ in range(41)]
    assert waits[:40] == [0.0] * 40
    # The 41st waits for the next minute (17.6 s away), not for a whole window.
    assert 17.6 <= waits[40] <= 18.6


def test_a_window_near_a_minute_but_off_its_lattice_is_not_snapped():
    # 61 s windows: close to a minute, but their starts drift a second a window off any
    # 60 s lattice, so the window is learned as it is.
    start = 1_700_000_000.0
    t = tracker()
    crawl_minute_window(t, start, start + 61.0 * 8, window=61.0)
    limit = t.state.limit
    assert limit is not None
    assert limit.window is not None
    assert 60.5 < limit.window <= 62.0


# -- token buckets: paced evenly ----------------------------------------------------------------


def crawl_bucket(
    t: HostTracker, rate: float, depth: int, seconds: float, header: Optional[str] = None
) -> list:
    """Drive ``t`` against a token bucket (``rate`` per second, ``depth`` deep, full at the
    start, refusing with ``header`` as ``Retry-After``, by default none: nginx's
    ``limit_req``), sending whenever the pacer allows (each request takes 2 ms). Returns
    ``(time, passed)`` for every request."""
    tokens, last, now, log = float(depth), 0.0, 0.0, []
    while now < seconds:
        now += t.reserve(now, WALL + now)
        tokens = min(float(depth), tokens + (now - last) * rate)
        last = now
        if tokens >= 1.0:
            tokens -= 1.0
            log.append((now, True))
            t.on_success(now, WALL + now)
        else:
            log.append((now, False))
            d = t.on_rejection(
                429, parse_retry_after(header, now=WALL + now), NO_INFO, now, WALL + now, 1
            )
            now += d.wait
        now += 0.002
    return log


def test_a_token_bucket_is_paced_evenly_and_probed_up_to_its_rate():
    t = tracker()
    log = crawl_bucket(t, rate=10.0, depth=6, seconds=120.0)
    # A burst of the bucket's depth at each window's start would cap the pace at ~6/s;
    # spread evenly, probing finds the rate.
    assert t.pacer.spread()
    late = [at for at, passed in log if passed and at >= 90.0]
    assert len(late) / 30.0 >= 9.0
    refused = [at for at, passed in log if not passed]
    # A refused re-probe now and then, ever further apart: the pace is not pushed into the
    # bucket again and again.
    late_refusals = [at for at in refused if at >= 30.0]
    assert len(late_refusals) <= 4
    gaps_between = [b - a for a, b in zip(late_refusals, late_refusals[1:])]
    assert gaps_between == sorted(gaps_between)
    # evenly: no two requests of the last 30 s closer than half the mean gap
    times = [at for at, _ in log if at >= 90.0]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 0.5 * (sum(gaps) / len(gaps))


def test_a_partial_first_window_with_a_long_recovery_is_not_taken_for_a_bucket():
    # 40 per 6 s, the run starting 4 s into a window: the first window seen lasts 2 s, but
    # the host then refuses for 2 s more, which no fast bucket does.
    start = (1_700_000_000.0 // 6.0) * 6.0 + 4.0
    t = tracker()
    crawl_minute_window(t, start, start + 60.0, window=6.0)
    limit = t.state.limit
    assert limit is not None
    assert not t.pacer.spread()
    assert limit.burst == 40
    assert limit.window is not None
    assert 6.0 <= limit.window <= 7.0


def test_one_refusal_inside_a_period_at_most_halves_the_budget():
    t = tracker(LimitEstimate(40 / 60.0, 60.0, burst=40, anchor=WALL))
    for _ in range(3):
        t.reserve(0.0, WALL)
        t.on_success(0.0, WALL)
    t.reserve(0.0, WALL)
    refuse(t, 0.0, "60")
    t.on_success(60.0, WALL + 60)
    assert t.state.limit is not None
    assert t.state.limit.burst == 20


@pytest.mark.parametrize("category", ["unknown", "truthful"])
def test_a_long_header_at_a_paced_windows_start_is_probed_unless_proven(category):
    t = HostTracker(
        HostState("h", category=category, limit=LimitEstimate(10 / 60.0, 60.0, burst=10)),
        Policy(),
        random.Random(0),
    )
    for _ in range(10):
        assert t.reserve(0.0, WALL) == 0.0
        t.on_success(0.0, WALL)
    # the next window's first request (a hair more than a window after the last)...
    assert t.reserve(60.0, WALL + 60) == pytest.approx(TUNING.reuse_margin)
    d = refuse(t, 60.0, "50")  # ...refused, with 50 s more asked for
    if category == "truthful":
        assert (d.trusted, d.wait) == (True, 50.0)
    else:
        # our windows run a little ahead of the host's: step out by a small part of one
        assert not d.trusted
        assert 1.0 <= d.wait <= 3.5
        assert "should be about to recover" in d.reason


def test_a_burst_probe_refused_at_the_old_budget_with_a_quick_recovery_shows_a_bucket():
    t = tracker(LimitEstimate(6.0, 1.0, burst=6))
    now = 0.0
    # whole windows at the learned budget until a probe adds one request at a window's start
    while t.pacer.budget() == (6, 1.0):
        now = float(int(now) + 1)
        for _ in range(6):
            # at the window's start, or a hair after it: a window after the place's last use
            wait = t.reserve(now, WALL + now)
            assert wait <= 10 * TUNING.reuse_margin
            t.on_success(now + wait, WALL + now + wait)
    assert t.pacer.budget() == (7, 1.0)
    assert not t.pacer.spread()
    for _ in range(6):
        t.reserve(now + 1.0, WALL + now + 1.0)
        t.on_success(now + 1.0, WALL + now + 1.0)
    t.reserve(now + 1.0, WALL + now + 1.0)
    refuse(t, now + 1.0, None)  # the 7th at once is refused...
    t.on_success(now + 2.0, WALL + now + 2.0)  # ...and the first retry passes
    assert t.state.limit is not None
    assert t.state.limit.even
    assert t.state.limit.burst == 6  # the budget stands; it is now spread across the window
    assert t.pacer.spread()
    waits = [t.reserve(now + 2.0, WALL + now + 2.0) for _ in range(5)]
    assert waits == pytest.approx([1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6])


@pytest.mark.parametrize(("served", "span", "depth"), [(12, 1.005, 12 / 1.005), (30, 7.0, 6.0)])
def test_a_bucket_s_depth_counts_a_burst_a_hair_longer_than_the_window(served, span, depth):
    # 12 let through over 1.005 s: some second of it held nearly 12, and a probe must hold
    # long enough to empty a bucket that deep (a burst 5 ms longer than the window once
    # counted for nothing, and a probe of twice the rate held after one second). 30 over
    # 7 s show no more than the budget.
    obs = Observation(WALL, 429, None, recovered=1.0, served=served, span=span)
    state = HostState("h", limit=LimitEstimate(6.0, 1.0, burst=6, even=True), observations=(obs,))
    t = HostTracker(state, Policy(), random.Random(0))
    assert t.pacer.depth() == pytest.approx(depth)


def test_a_guess_s_budget_counts_only_the_take_that_held_in_a_bucket_s_depth():
    # One worker of four got 6 through in a window, and guessed 24 for the host: the host
    # showed a bucket 6 deep at most, and a probe holds once it could have emptied that.
    guess = LimitEstimate(24.0, 1.0, burst=24, by="w1", shares=4)
    t = HostTracker(HostState("h", limit=guess), Policy(), random.Random(0))
    assert t.pacer.depth() == pytest.approx(6.0)
    alone = LimitEstimate(24.0, 1.0, burst=24, by="w1")
    t = HostTracker(HostState("h", limit=alone), Policy(), random.Random(0))
    assert t.pacer.depth() == pytest.approx(24.0)


@pytest.mark.parametrize("header", [None, "1"])
@pytest.mark.parametrize("rate", [5.0, 10.0, 20.0])
@pytest.mark.parametrize("depth", [1, 6])
def test_a_token_bucket_is_found_within_seconds_from_a_cold_start(rate, depth, header):
    # nginx's limit_req (depth 1: no burst; 6: burst=5), with no header or a truthful
    # "Retry-After: 1". The first refusal shows only that the host had recovered by the first
    # retry, or (a deeper burst, with the header obeyed) a budget at a window's start until a
    # probe of one more is refused and shows a bucket: either way the rate is a lower bound,
    # and the search doubles it until refused, then bisects. Within 30 s the pace is near
    # the rate.
    t = tracker()
    log = crawl_bucket(t, rate=rate, depth=depth, seconds=30.0, header=header)
    passed = [at for at, ok in log if ok]
    refused = [at for at, ok in log if not ok]
    assert len([at for at in passed if at >= 20.0]) / 10.0 >= 0.75 * rate
    assert len(refused) <= max(6, 0.05 * len(passed))


@pytest.mark.parametrize("phase", [1.25, 1.5, 3.25])
def test_window_starts_that_fit_a_lattice_give_the_window_even_when_the_pace_hides_it(phase):
    # 40 per 5 s on the clock, no header. The first, partial window makes the pace's window
    # too short, so later refusals come at a paced window's first request and are soon over
    # (nothing to learn from one alone). But the time between two recoveries, and the window
    # starts the refusals located, fit one lattice of 5 s: the window and its phase are known.
    start = MINUTE + phase
    t = tracker()
    crawl_minute_window(t, start, start + 40.0, window=5.0, truthful=False)
    limit = t.state.limit
    assert limit is not None
    assert (limit.burst, limit.window) == (40, 5.0)
    assert limit.anchor is not None
    assert limit.anchor % 5.0 <= 1.0  # at or a little after a window start


# -- a window measured late is narrowed -----------------------------------------------------


def crawl_window(t: HostTracker, limiter, seconds: float, wall: float = WALL) -> list:
    """Drive ``t`` against ``limiter`` (a window from ``requests_retryafter.testing``, no
    ``Retry-After``) from epoch ``wall``, sending whenever the pacer allows (each request
    takes 2 ms). Returns ``(time, passed, window)`` for every request, ``window`` the learned
    one after it."""
    now, log = 0.0, []
    while now < seconds:
        now += t.reserve(now, wall + now)
        if limiter.next_free(wall + now) <= wall + now:
            limiter.consume(wall + now)
            t.on_success(now, wall + now)
            passed = True
        else:
            d = t.on_rejection(
                429, parse_retry_after(None, now=wall + now), NO_INFO, now, wall + now, 1
            )
            passed = False
            now += d.wait
        limit = t.state.limit
        log.append((now, passed, None if limit is None else limit.window))
        now += 0.002
    return log


def test_a_window_measured_late_is_narrowed_without_a_refusal():
    # 30 per 20 s, moving; the window was measured from a recovery found 34 s late (own
    # backoff's last draw): somewhere between 19.5 s and what leaning early made of it.
    t = tracker(LimitEstimate(30 / 28.0, 28.0, burst=30, shortest=19.5))
    log = crawl_window(t, SlidingWindow(30, 20.0), 300.0)
    assert [at for at, passed, _ in log if not passed] == []
    limit = t.state.limit
    assert limit is not None
    assert limit.window is not None
    assert 20.0 <= limit.window <= 20.0 * TUNING.search_gap
    assert all(w is None or w >= 20.0 for _, _, w in log)
    # Paced at the window found: the last 100 s at 30 per window, within the search's gap.
    late = [at for at, passed, _ in log if passed and at >= 200.0]
    assert len(late) >= 100.0 * 1.5 / TUNING.search_gap - 30


def test_a_refused_shorter_window_keeps_the_one_that_held_and_bounds_the_next_probe():
    # The evidence allowed anything from 10 s to 28 s; the host's window is 25 s.
    t = tracker(LimitEstimate(30 / 28.0, 28.0, burst=30, shortest=10.0))
    log = crawl_window(t, SlidingWindow(30, 25.0), 400.0)
    limit = t.state.limit
    assert limit is not None
    assert limit.window is not None
    assert limit.shortest is not None
    assert 25.0 <= limit.window <= 28.0
    assert limit.window <= TUNING.search_gap * limit.shortest  # narrowed down
    # Each shorter window refused cost one refusal: its retry waited for the one that held.
    refused = [at for at, passed, _ in log if not passed]
    assert 1 <= len(refused) <= 4
    assert all(w is None or w >= 25.0 for _, _, w in log)


def test_a_refused_shorter_window_is_retried_at_the_next_start_whatever_the_header():
    # An unreliable header may stretch own backoff's search, not a retry aimed at the start
    # of the window that held: stretched, each refused probe cost up to twice its wait.
    limit = LimitEstimate(30 / 28.0, 28.0, burst=30, shortest=10.0)
    t = HostTracker(HostState("h", category="unreliable", limit=limit), Policy(), random.Random(0))
    for _ in range(30):
        assert t.reserve(0.0, WALL) == 0.0
        t.on_success(0.0, WALL)
    probe = t.reserve(0.0, WALL)  # the next period, at a shorter window
    assert 10.0 < probe < 28.0
    d = refuse(t, probe, "100")
    assert d.wait == pytest.approx(28.0 - probe, abs=0.01)


@pytest.mark.parametrize("seed", range(8))
def test_a_moving_window_found_by_own_backoff_ends_within_the_search_gap(seed):
    # No header, a cold start, a window of no round length: own backoff finds the first
    # window's end late by up to three times its length, and the window measured from it
    # is then narrowed: the search ends within its gap of the real window, never below it.
    t = HostTracker(HostState("h"), Policy(), random.Random(seed), "")
    log = crawl_window(t, SlidingWindow(30, 23.0), 600.0)
    limit = t.state.limit
    assert limit is not None
    assert limit.window is not None
    if limit.shortest is not None:
        assert 23.0 <= limit.window <= 23.0 * TUNING.search_gap
    assert all(w is None or w >= 23.0 for _, _, w in log[len(log) // 2 :])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("phase", [0.0, 20.0, 30.0])
@pytest.mark.parametrize(("length", "budget"), [(45.0, 50), (90.0, 60)])
def test_a_window_of_no_round_length_is_not_left_on_a_longer_round_lattice(
    length, budget, phase, seed
):
    # Fixed windows on the clock, no header, a cold start. Own backoff aims its retries at
    # round ends (60 s, 120 s), and the time between two recoveries can then allow only
    # that round length, longer than the episode measured: its lattice is on trial, and
    # narrowed like any window measured late. (Taken as exact, the host was paced at 0.75
    # of its rate for good.)
    t = HostTracker(HostState("h"), Policy(), random.Random(seed), "")
    crawl_window(t, FixedWindow(budget, length), 20 * length, wall=WALL + phase)
    limit = t.state.limit
    assert limit is not None
    assert limit.window is not None
    assert length / TUNING.search_gap <= limit.window <= length * TUNING.search_gap


def test_a_lattice_on_trial_that_is_the_hosts_stays_and_its_probes_cost_a_refusal_each():
    # A minute's lattice, on trial from 40 s (the shortest the episode that located it
    # allowed): the narrowing's shorter windows are refused, each retried at the lattice's
    # next start; the lattice and its phase stay.
    t = tracker(LimitEstimate(50 / 60.0, 60.0, burst=50, anchor=MINUTE, shortest=40.0))
    log = crawl_window(t, FixedWindow(50, 60.0), 600.0)
    limit = t.state.limit
    assert limit is not None
    assert limit.window == 60.0
    assert limit.shortest is None or TUNING.search_gap * limit.shortest >= 60.0  # tried
    assert limit.anchor is not None
    assert limit.anchor % 60.0 <= 1.0
    refused = [at for at, passed, _ in log if not passed]
    assert 1 <= len(refused) <= 3
    assert all(w == 60.0 for _, _, w in log)


def test_a_lattice_on_trial_is_tried_shorter_from_a_period_used_from_its_start():
    # 60 per 90 s on the clock, on trial as 120 s; the run starts 60 s into a window of
    # that lattice and 10 s into one of the host's. A shorter window (93 s) tried from that
    # period's start, which no request used, came 33 s after the run's first burst, was
    # refused, and the host's window was taken for longer than both (133 s).
    begin = (WALL // 90.0) * 90.0 + 10.0
    t = tracker(LimitEstimate(60 / 120.0, 120.0, burst=60, anchor=begin - 60.0, shortest=72.5))
    log = crawl_window(t, FixedWindow(60, 90.0), 900.0, wall=begin)
    assert all(w is None or w <= 120.0 for _, _, w in log)
    limit = t.state.limit
    assert limit is not None
    assert limit.window is not None
    assert limit.anchor is None  # a shorter window held: the lattice was not the host's
    assert 90.0 / TUNING.search_gap <= limit.window <= 90.0 * TUNING.search_gap


def test_a_window_located_on_the_clock_is_entered_a_margin_after_it_starts():
    # Sent at the very moment a window starts, a request a hair early is refused, and the
    # whole-second header of that refusal reads as window starts coming later.
    t = tracker(LimitEstimate(1.0, 10.0, burst=10, anchor=WALL))
    waits = []
    for _ in range(11):
        waits.append(t.reserve(0.0, WALL))
        t.on_success(0.0, WALL)
    assert waits[:10] == [0.0] * 10  # inside the window: at once
    assert waits[10] == pytest.approx(10.0 + TUNING.located_margin)
    # A window counted from a recovery may be a sliding one: a place is used again a hair
    # more than a window after its last use (see the next test).
    t = tracker(LimitEstimate(1.0, 10.0, burst=10))
    waits = [t.reserve(0.0, WALL) for _ in range(11)]
    assert waits[10] == pytest.approx(10.0 + TUNING.reuse_margin)


def test_a_window_start_located_a_hair_after_now_is_the_window_that_has_just_begun():
    # A start located at a recovery, computed from the episode's times, can come out a
    # microsecond after the clock's reading of that moment: it is the window just begun,
    # not one about to end (whose next window would take the budget again at once).
    t = tracker(LimitEstimate(1.0, 10.0, burst=10, anchor=WALL + 1e-6))
    waits = [t.reserve(0.0, WALL) for _ in range(11)]
    assert waits[:10] == [0.0] * 10
    assert waits[10] == pytest.approx(10.0 + TUNING.located_margin, abs=1e-5)


@pytest.mark.parametrize("located", [False, True])
def test_a_place_that_went_late_in_its_window_is_used_again_a_window_after_it(located):
    # A sliding window (a log of the last window's requests) lets a request through only a
    # window after the one it replaces; a window located on the clock is a fixed one, whose
    # next window takes its whole budget at its start.
    t = tracker(LimitEstimate(0.3, 10.0, burst=3, anchor=WALL if located else None))
    assert t.reserve(0.0, WALL) == 0.0
    assert t.reserve(0.0, WALL) == 0.0
    assert t.reserve(4.0, WALL + 4.0) == 0.0  # the client was busy elsewhere
    waits = [t.reserve(10.0, WALL + 10.0) for _ in range(3)]
    if located:
        assert waits == [0.0, 0.0, 0.0]
    else:
        margin = TUNING.reuse_margin
        assert waits == pytest.approx([margin, margin, 4.0 + margin])
    # A recovery is a window start, whatever went before: its window's budget goes at once.
    refuse(t, 10.0 + waits[2], None)
    t.on_success(12.0, WALL + 12.0)
    assert [t.reserve(12.0, WALL + 12.0) for _ in range(2)] == [0.0, 0.0]


@pytest.mark.parametrize("phase", [0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("length", [20.0, 17.0])
def test_a_round_window_from_the_last_recovery_is_retried_as_it_ends(length, phase):
    # Learned from a run's partial first window: 60 per 4 s. The host's windows are
    # ``length`` long and one started ``phase`` s after a refusal at 0, found by a retry at
    # 1 s: the recovery located a window start to within a second. Refused as our next
    # window starts (long before the host's), the search retries where a round window from
    # that start ends within its step, in the middle of the second first, then at its end:
    # a 20 s window is found within a floor of its end (the random steps found it up to
    # twice as late). A window of no round length is found within the search's bound.
    for seed in range(20):
        limit = LimitEstimate(15.0, 4.0, burst=60)
        t = HostTracker(HostState("h", limit=limit), Policy(), random.Random(seed))
        refuse(t, 0.0, None)
        t.on_success(1.0, WALL + 1.0)  # the host recovered: a window started in (0, 1]
        now = 1.0
        for _ in range(59):  # the rest of the window's budget
            now += t.reserve(now, WALL + now)
            t.on_success(now, WALL + now)
        now += t.reserve(now, WALL + now)  # our next window starts: the host's does not
        start, opens = now, phase + length
        assert start == pytest.approx(5.0, abs=0.01)
        while now < opens:
            now += refuse(t, now, None).wait
        if length == 20.0:
            assert now <= opens + Policy().min_sleep
        assert now <= max(opens + 1.0, start + 2 * (opens - start)) + 1e-9


def test_refused_at_a_paced_windows_start_the_search_starts_from_the_floor():
    # Learned from a run's partial first window: 60 per 4 s (the host's is 60 per 20 s),
    # with recoveries of about 10 s seen. Our next window starts ``late`` seconds before the
    # host's: the wait is a doubling search from the floor (not the recoveries seen, not
    # steps of a part of the misread window), so the first success comes at most twice as
    # late as the host's window start (or a floor after it), and 1.35 times on average.
    seen = tuple(
        Observation(WALL - 600 + 60 * i, 429, None, recovered=10.0, failed_until=9.0)
        for i in range(5)
    )
    ratios = []
    for late in (5.0, 8.0, 12.0, 16.0):
        for seed in range(20):
            limit = LimitEstimate(15.0, 4.0, burst=60)
            state = HostState("h", limit=limit, observations=seen)
            t = HostTracker(state, Policy(), random.Random(seed))
            now = 0.0
            for _ in range(60):  # the first window's budget, let through
                now += t.reserve(now, WALL + now)
                t.on_success(now, WALL + now)
            now += t.reserve(now, WALL + now)  # our next window starts: the host's does not
            assert now == pytest.approx(4.0, abs=0.01)
            start, opens = now, now + late
            while now < opens:
                now += refuse(t, now, None).wait
            assert now <= max(opens + 1.0, start + 2 * late) + 1e-9
            ratios.append((now - start) / late)
    assert sum(ratios) / len(ratios) <= 1.45  # steps of 5 % of the window: 1.49


@pytest.mark.parametrize("length", [10.0, 20.0, 30.0])
def test_a_round_window_from_the_runs_last_success_is_retried_as_it_ends(length):
    # A host nothing is known of, whose windows of 50 requests open at a client's first
    # request (as many limiters count them). The first 50 go through, 1 ms apart, the 51st
    # is refused with no header. The window began no later than the last success: the
    # search retries where a round window from it ends, here 49 ms after the host's window
    # does, or a floor after it where the step before came closer (the random steps alone
    # found it up to twice as late).
    for seed in range(20):
        t = HostTracker(HostState("h"), Policy(), random.Random(seed))
        now = 0.0
        for _ in range(50):
            now += t.reserve(now, WALL + now) + 0.001
            t.on_success(now, WALL + now)
        opens = 0.001 + length
        now += 0.001
        while now < opens:
            now += refuse(t, now, None).wait
        assert now <= opens + Policy().min_sleep


def test_on_a_sliding_window_the_search_retries_once_the_whole_first_burst_has_left_it():
    # A host nothing is known of, with a sliding window of 10 requests per 10 s, and
    # requests that take 5 ms each: the first ten go through over 45 ms, the eleventh is
    # refused. The window frees its places one by one, 10 s after each request: the search
    # retries once the last of the ten has left it (a round window from the run's last
    # success), within a floor of that, and then the whole budget goes through. (Counted
    # from the first success, the retry got the one place freed, the next request was
    # refused, and a window learned from that halved the budget: 0.53 of the allowed rate
    # against the `limits` library's moving window.)
    for seed in range(20):
        host = SlidingWindow(10, 10.0)
        t = HostTracker(HostState("h"), Policy(), random.Random(seed))
        now, refused, passed = 0.0, [], []
        while len(passed) < 20:
            now += t.reserve(now, WALL + now)
            if host.next_free(now) <= now:
                host.consume(now)
                passed.append(now)
                t.on_success(now, WALL + now)
            else:
                refused.append(now)
                now += refuse(t, now, None).wait
            now += 0.005
        recovery = passed[10]
        assert 10.045 <= recovery <= 10.045 + Policy().min_sleep
        assert [at for at in refused if at > recovery] == []


@pytest.mark.parametrize("window", [0.5, 5.0])
def test_a_window_changed_under_the_pace_waits_no_more_than_one_of_its_windows(window):
    # Workers sharing a store: one learns a window of another length, and the others merge
    # it in while their periods are counted in the old one. The next request of each waits
    # for a window of the new length at most (counted in the old periods, 16 periods of 1 s
    # read as periods of 5 s put it over a minute away).
    t = tracker(LimitEstimate(4.0, 1.0, burst=4))
    now = 0.0
    while now < 16.0:
        now += t.reserve(now, WALL + now)
        t.on_success(now, WALL + now)
        now += 0.01
    t.state = t.state.replace(limit=LimitEstimate(2.0, window, burst=int(2 * window) or 1))
    waits = []
    for _ in range(3):
        wait = t.reserve(now, WALL + now)
        waits.append(wait)
        now += wait
        t.on_success(now, WALL + now)
    assert max(waits) <= window + 0.01


@pytest.mark.parametrize("rate", [10.0, 20.0, 50.0])
def test_a_bucket_without_a_burst_is_doubled_past_its_rate_within_seconds(rate):
    # nginx's limit_req with no burst, no header: the first refusal teaches one request a
    # second, a lower bound. Spread evenly, each doubling holds once two gaps at its pace
    # went by (such a bucket refuses the second of two requests too close), not at the end
    # of a one-second period: the probe past the rate (its refusal) comes within 4 s of the
    # first request, not 5 to 7 s.
    t = tracker()
    log = crawl_bucket(t, rate=rate, depth=1, seconds=10.0)
    refused = [at for at, ok in log if not ok]
    assert refused[0] < 0.01  # the second request, at once
    assert 0.0 < refused[1] < 4.0


@pytest.mark.parametrize(("rate", "depth"), [(10.0, 1), (20.0, 1), (5.0, 3)])
def test_a_budget_the_search_saw_refused_is_re_probed_as_after_a_refused_probe(rate, depth):
    # The search's refused probe bounded it; its spacing waited for the search to end. The
    # first slow re-probe after the search (one step up: the budget refused) comes no sooner
    # than one after a refused re-probe would: twice probe_min_seconds after the search.
    t = tracker()
    log = crawl_bucket(t, rate=rate, depth=depth, seconds=120.0)
    refused = [at for at, ok in log if not ok]
    search = [at for at in refused if at < 15.0]
    later = [at for at in refused if at >= 15.0]
    assert later  # the slow re-probes go on
    assert later[0] - search[-1] >= 2 * TUNING.probe_min_seconds


def test_windows_a_client_opens_are_learned_from_when_its_requests_went():
    # 40 per 20 s, each window opened by the first request to arrive after the last one
    # expired (a counter with an expiry set at its first hit), no header; requests take
    # 5 ms to arrive, and every other recovery's answer 3 s to come back. A window our
    # recovery opened ends 20 s after that request arrived, 17 s after its late answer.
    # Counted from when the request went, each cycle shows the window as it is: 20 s (from
    # the answers, 21.4 s), and no recovery sooner than a window after it, so the windows
    # are of our making and no phase is kept for the next run (which would send a window's
    # budget in the middle of its own).
    start = MINUTE + 7.3
    t = tracker()
    opened, count, recoveries = float("-inf"), 0, 0
    refused = False
    now = start
    while now < start + 300.0:
        now += t.reserve(now - start, now)
        sent = now
        arrived = answered = now + 0.005
        if arrived >= opened + 20.0:
            opened, count = arrived, 0
        if count < 40:
            if refused:
                recoveries += 1
                answered += 3.0 if recoveries % 2 else 0.0
            refused = False
            count += 1
            now = answered
            t.on_success(answered - start, answered, sent=sent - start)
            continue
        refused = True
        now = answered
        d = t.on_rejection(429, parse_retry_after(None, now=now), NO_INFO, now - start, now, 1)
        now += d.wait
    limit = t.state.limit
    assert limit is not None
    assert limit.window == pytest.approx(20.0, abs=0.5)
    assert limit.anchor is None


def test_a_client_back_from_a_pause_is_paced_evenly_not_in_a_burst():
    # A token bucket paced at 9 a second (a gap of 0.111 s). The client pauses 5.5 s, then
    # sends as fast as it may: the places of the current period whose time has passed do not
    # all go at once (nginx without a burst refuses the second of two that come together).
    t = tracker(LimitEstimate(9.0, 1.0, burst=9, even=True))
    now, sends = 0.0, []
    for _ in range(3):
        now += t.reserve(now, WALL + now)
        sends.append(now)
        now += 0.002  # its answer
    now = 5.55
    for _ in range(6):
        now += t.reserve(now, WALL + now)
        sends.append(now)
        now += 0.002
    gaps = [b - a for a, b in zip(sends, sends[1:])]
    assert min(gaps) >= 1 / 9 - 1e-9
    # A client slower than the pace is not slowed further: each send goes when it asks.
    t = tracker(LimitEstimate(9.0, 1.0, burst=9, even=True))
    asked = [0.3 * i for i in range(8)]
    assert all(t.reserve(at, WALL + at) == 0.0 for at in asked)
