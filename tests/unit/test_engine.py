"""``HostTracker``: the per-host decisions, without I/O (time is passed in)."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import List, Optional

import pytest

from requests_retryafter import (
    Category,
    Code,
    HostState,
    LimitEstimate,
    Observation,
    Policy,
    Search,
    parse_retry_after,
)
from requests_retryafter.engine import HostTracker
from requests_retryafter.parsing import RateLimitInfo
from requests_retryafter.tuning import TUNING, Tuning

WALL = 1_700_000_000.0  # 800 s into an hour: the next top of the hour is 2800 s away
TO_THE_HOUR = 2800.0
NO_LIMIT = RateLimitInfo()


def tracker(
    category: str = "unknown", policy: Optional[Policy] = None, *, tuning: Tuning = TUNING, **state
) -> HostTracker:
    return HostTracker(
        HostState("api.example.org", category=category, **state),
        policy or Policy(),
        random.Random(0),
        tuning=tuning,
    )


#: Thresholds under which no trial of an even pace comes (it would pace the host instead of
#: its statements).
NO_TRIALS = dataclasses.replace(TUNING, trial_after=1_000)


def reject(
    t: HostTracker,
    header: Optional[str],
    at: float = 0.0,
    *,
    status: int = 429,
    info: RateLimitInfo = NO_LIMIT,
    attempt: int = 1,
):
    """A rejection ``at`` seconds after the start (monotonic ``at``, wall ``WALL + at``)."""
    parsed = parse_retry_after(header, now=WALL + at)
    return t.on_rejection(status, parsed, info, at, WALL + at, attempt)


def test_trusted_header_sets_the_hosts_wait():
    t = tracker()
    d = reject(t, "30")
    assert (d.event, d.wait, d.trusted, d.header) == ("sleep", 30.0, True, 30.0)
    assert d.host == "api.example.org"
    assert "obeyed" in d.reason
    assert t.gate(0.0, WALL) == 30.0
    assert t.gate(10.0, WALL + 10) == 20.0
    assert t.gate(30.0, WALL + 30) == 0.0
    assert t.state.blocked_until == WALL + 30


@pytest.mark.parametrize("header", ["0", "Sun, 06 Nov 1994 08:49:37 GMT", None, "banana", "1.5"])
def test_no_usable_wait_gives_own_backoff_floored_at_min_sleep(header):
    d = reject(tracker(), header)
    assert d.event == "sleep"
    assert not d.trusted
    # First rejection: uniform(0, backoff_base * 2**0) = at most 1 s, floored at 1 s.
    assert d.wait == 1.0


def test_floor_follows_the_policy():
    t = tracker(policy=Policy(min_sleep=5.0))
    assert reject(t, "0").wait == 5.0
    t = tracker(policy=Policy(min_sleep=5.0))
    assert reject(t, "2").wait == 5.0


def test_header_up_to_plausible_wait_is_trusted_on_first_sight():
    assert reject(tracker(), "60").wait == 60.0
    d = reject(tracker(), "61")
    assert not d.trusted
    # Probed after the floor, 1 s: at whole seconds, enough to tell a countdown (one less)
    # from a constant header (the same).
    assert d.wait == 1.0
    assert "not yet trusted" in d.reason


def test_a_long_header_is_held_once_a_second_rejection_counts_it_down():
    t = tracker()
    first = reject(t, str(int(TO_THE_HOUR)))
    assert (first.event, first.trusted) == ("sleep", False)  # no clock arithmetic
    assert not t.held(WALL)
    second = reject(t, str(int(TO_THE_HOUR - first.wait)), at=first.wait, attempt=2)
    assert second.event == "hold"
    assert second.trusted
    assert second.until == WALL + TO_THE_HOUR
    assert "counts down" in second.reason
    assert t.held(WALL + first.wait)
    assert t.held(WALL + TO_THE_HOUR - 1)
    assert not t.held(WALL + TO_THE_HOUR)
    assert t.state.held_until == WALL + TO_THE_HOUR
    assert t.state.hold_reason == second.reason


def test_a_long_header_that_stays_put_is_not_held():
    t = tracker()
    first = reject(t, "3600")
    second = reject(t, "3600", at=first.wait, attempt=2)
    assert second.event == "sleep"
    assert not second.trusted
    assert not t.held(WALL + first.wait)


def test_http_date_of_the_next_hour_holds_the_host_once_repeated():
    date = "Tue, 14 Nov 2023 23:00:00 GMT"  # the top of the next hour
    t = tracker()
    first = reject(t, date)
    assert first.event == "sleep"
    second = reject(t, date, at=first.wait, attempt=2)
    assert (second.event, second.until) == ("hold", WALL + TO_THE_HOUR)


def test_hold_is_capped_at_max_hold():
    t = tracker(policy=Policy(max_hold=3600.0))
    header = TO_THE_HOUR + 3 * 3600
    first = reject(t, str(int(header)))
    d = reject(t, str(int(header - first.wait)), at=first.wait, attempt=2)
    assert d.event == "hold"
    assert d.until == WALL + first.wait + 3600.0


def test_trusted_wait_within_max_sleep_is_a_sleep_not_a_hold():
    info = RateLimitInfo(remaining=0, reset_after=100.0)  # corroborated by a stated reset
    d = reject(tracker(), "100", info=info)
    assert (d.event, d.wait, d.trusted) == ("sleep", 100.0, True)


def test_stated_reset_corroborates_a_large_header():
    info = RateLimitInfo(remaining=0, reset_after=250.0)
    d = reject(tracker(), "250", info=info)
    assert (d.event, d.wait, d.trusted) == ("sleep", 250.0, True)
    assert "stated reset" in d.reason


def test_always_zero_host_ignores_its_header():
    d = reject(tracker("always_zero"), "30")
    assert not d.trusted
    assert d.wait == 1.0
    assert "ignored" in d.reason


def unreliable(policy: Optional[Policy] = None, recovered: float = 40.0) -> HostTracker:
    """An unreliable host that has recovered in ``recovered`` seconds (own backoff aims there)."""
    obs = (Observation(at=WALL - 1000, status=429, header=5.0, recovered=recovered),)
    return tracker("unreliable", policy, observations=obs)


def test_unreliable_host_takes_the_larger_of_header_and_own_backoff():
    # own backoff aims at the 40 s recovery seen (with up to 10% jitter)
    d = reject(unreliable(), "5")
    assert 40.0 <= d.wait <= 44.0
    assert not d.trusted
    d = reject(unreliable(), "70")
    assert d.wait == 70.0
    assert not d.trusted


def test_an_unreliable_header_stretches_own_backoff_at_most_twice():
    d = reject(unreliable(), "3600")
    assert 80.0 <= d.wait <= 88.0
    assert "counted up to" in d.reason


def test_an_unreliable_wait_is_capped_at_max_sleep():
    d = reject(unreliable(Policy(max_sleep=50.0)), "3600")
    assert (d.event, d.wait, d.trusted) == ("sleep", 50.0, False)
    assert "capped" in d.reason


def test_constant_overstated_host_is_clamped_to_its_learned_recovery():
    obs = tuple(
        Observation(at=WALL - 1000 * i, status=429, header=3600.0, recovered=20.0)
        for i in range(3, 0, -1)
    )
    t = tracker("constant_overstated", observations=obs)
    d = reject(t, "3600")
    assert d.event == "sleep"
    assert 20.0 <= d.wait <= 22.0  # the learned recovery, with up to 10 % jitter
    assert not t.held(WALL)


def test_truthful_host_is_trusted_up_to_four_times_its_recoveries():
    obs = (Observation(at=WALL - 5000, status=429, header=100.0, recovered=100.0),)
    t = tracker("truthful", observations=obs)
    d = reject(t, "250", at=1.0)
    assert (d.wait, d.trusted) == (250.0, True)
    t = tracker("truthful", observations=obs)
    d = reject(t, "401", at=1.0)
    assert not d.trusted


def test_own_backoff_grows_with_full_jitter_and_is_capped():
    policy = Policy(backoff_base=1.0, backoff_cap=8.0, max_attempts=20)
    for seed in range(20):
        t = HostTracker(HostState("h"), policy, random.Random(seed))
        mono = 0.0
        for k in range(8):
            d = reject(t, None, at=mono)
            assert 1.0 <= d.wait <= max(1.0, min(8.0, 2.0**k))
            mono += d.wait
    # The jitter is real: the same step differs between seeds.
    waits = set()
    for seed in range(5):
        t = HostTracker(HostState("h"), policy, random.Random(seed))
        reject(t, None, at=0.0)
        reject(t, None, at=1.0)
        waits.add(reject(t, None, at=2.0).wait)
    assert len(waits) > 1


@pytest.mark.parametrize("status", [429, 503])
def test_a_host_paced_evenly_is_retried_from_one_gap_and_never_past_backoff_cap(status):
    # A bucket or a counter frees a place every gap at its rate: the first retry comes at
    # the floor (the gap, 0.5 s, is shorter), and the search doubles from there. A host
    # that goes on refusing (a maintenance with no header, no recovery seen yet) is never
    # waited longer than the policy's backoff_cap, as any own backoff.
    policy = Policy(backoff_cap=8.0, max_attempts=100)
    limit = LimitEstimate(rate=2.0, window=1.0, burst=2, even=True, updated_at=WALL)
    for seed in range(10):
        t = HostTracker(HostState("h", category="absent", limit=limit), policy, random.Random(seed))
        mono, waits = 0.0, []
        for _ in range(12):
            d = reject(t, None, at=mono, status=status)
            waits.append(d.wait)
            mono += d.wait
        assert waits[0] < 1.3  # one gap, floored at 1 s, jittered
        assert max(waits) <= 8.0
        assert waits[-1] == 8.0


@pytest.mark.parametrize("recovery", [1.5, 3.0, 7.0, 10.0, 19.5, 30.0, 59.0, 100.0])
def test_own_backoff_finds_a_recovery_at_most_twice_as_late(recovery):
    """Without evidence, own backoff is a doubling search for the host's recovery: the first
    retry at or after it comes at most twice as late (or one floor after it, early on), and
    the refusals before it grow with the logarithm of its length, not with its length."""
    policy = Policy(max_attempts=1000)
    late = []
    for seed in range(40):
        t = HostTracker(HostState("h"), policy, random.Random(seed))
        mono, refusals = 0.0, 0
        while mono < recovery:
            d = reject(t, None, at=mono)
            assert d.code == Code.OWN_BACKOFF
            mono += d.wait
            refusals += 1
        assert mono <= max(2.0 * recovery, recovery + policy.min_sleep) + 1e-9
        # Each retry 1.5 times as far into the episode at least, after the floor's two.
        assert refusals <= 3 + math.log(recovery) / math.log(1.5)
        late.append(mono / recovery)
    assert sum(late) / len(late) < 1.6  # about 1.35 on average; full jitter's was 1.5


def test_success_closes_the_episode_with_what_was_observed():
    t = tracker()
    reject(t, "20", at=0.0)
    reject(t, "5", at=20.0, attempt=2)
    decision = t.on_success(26.0, WALL + 26)
    (obs,) = t.state.observations
    assert obs.at == WALL
    assert obs.status == 429
    assert obs.header == 20.0  # the episode's first header
    assert obs.form == "delta"
    assert obs.recovered == 26.0
    assert obs.failed_until == 20.0
    assert t.episode is None
    # Refused after the first header's time: no evidence for the header (nor yet against it).
    assert obs.misses == 1
    assert decision is None
    assert t.state.category == "unknown"


def test_a_recovery_when_the_header_said_makes_the_host_truthful():
    t = tracker()
    reject(t, "20", at=0.0)
    decision = t.on_success(20.0, WALL + 20)
    assert decision is not None
    assert decision.event == "category"
    assert t.state.category == "truthful"
    assert decision.code == Code.FIRST_JUDGED  # from unknown: news, not a change of mind


def test_a_later_change_of_category_has_the_category_code():
    t = tracker(category="truthful")
    reject(t, "0", at=0.0)
    decision = t.on_success(20.0, WALL + 20)
    assert decision is not None
    assert decision.category == Category.ALWAYS_ZERO
    assert decision.code == Code.CATEGORY


def test_success_without_an_episode_changes_nothing():
    t = tracker()
    assert t.on_success(0.0, WALL) is None
    assert t.state.observations == ()


@pytest.mark.parametrize(
    ("first", "second", "countdown"),
    [
        ("2800", "2790", True),  # ten seconds later, same reset time
        ("3600", "3600", False),  # ten seconds later, same value: not counting down
    ],
)
def test_countdown_is_detected_within_an_episode(first, second, countdown):
    t = tracker(policy=Policy(plausible_wait=5000))
    reject(t, first, at=0.0)
    reject(t, second, at=10.0, attempt=2)
    t.on_success(20.0, WALL + 20)
    assert t.state.observations[0].countdown is countdown


@pytest.mark.parametrize(
    "headers",
    [
        # Each pair below agrees by chance with a header two or more back, or with the one
        # before it after the episode's headers pointed at two other moments already.
        [(0.0, "73"), (1.0, "4"), (5.0, "54"), (11.0, "61")],  # 61 s at 11 s ~ 73 s at 0
        [(0.0, "17"), (17.0, "72"), (19.0, "108"), (26.0, "102")],  # third moment's pair
    ],
    ids=["agrees with an older header", "pair after three moments"],
)
def test_random_headers_that_agree_by_chance_are_no_countdown(headers):
    """A countdown is successive headers pointing at one reset. Headers drawn at random
    (0..120 s) agree within the rounding once in forty, and a run sees many: a pair that
    agrees only by skipping the headers between, or after the episode's headers pointed at
    two other moments, corroborates nothing (it made a 60 s window wait 102 s)."""
    t = tracker(policy=Policy(plausible_wait=5000))
    for attempt, (at, header) in enumerate(headers, start=1):
        d = reject(t, header, at=at, attempt=attempt)
        assert "counts down" not in d.reason
    t.on_success(130.0, WALL + 130)
    assert t.state.observations[0].countdown is not True


def test_a_countdown_after_one_other_reset_is_still_one():
    # A window's 429 (10 s), then a maintenance counting down its end from 500 s: two
    # moments in the episode, the second counted down.
    t = tracker(policy=Policy(plausible_wait=5000))
    reject(t, "10")
    reject(t, "500", at=10.0, attempt=2)
    d = reject(t, "495", at=15.0, attempt=3)
    assert "counts down" in d.reason


def test_rate_is_learned_from_successes_before_a_rejection():
    t = tracker()
    for i in range(10):
        t.on_success(float(i), WALL + i)
    assert t.state.limit is None
    reject(t, "10", at=10.0)
    t.on_success(20.0, WALL + 20)
    limit = t.state.limit
    assert limit is not None
    assert limit.source == "observed"
    # 10 requests went through in the 20 s from the first one to the recovery.
    assert limit.rate == pytest.approx(10 / 20)
    assert t.pacer.pace_rate() == pytest.approx(10 / 20 * Policy().utilization)
    assert t.state.limit_history[-1][1] == pytest.approx(limit.rate, abs=1e-6)


def test_no_pacing_without_a_limit_or_when_disabled():
    assert tracker().pacer.pace_rate() is None
    t = tracker(policy=Policy(pace=False), limit=LimitEstimate(rate=2.0))
    assert t.pacer.pace_rate() is None


def test_stated_limit_seeds_pacing_and_remaining_zero_waits_for_the_reset():
    t = tracker(policy=Policy(utilization=1.0))
    t.on_stated_limit(RateLimitInfo(limit=60, window=60.0), 0.0, WALL)
    assert t.state.limit is not None
    assert t.state.limit.source == "stated"
    assert t.pacer.pace_rate() == 1.0
    assert t.state.limit.documented == 1.0
    t.on_stated_limit(RateLimitInfo(remaining=0, reset_after=12.0), 0.0, WALL)
    assert t.gate(0.0, WALL) == 12.0


def test_stated_reset_wait_is_capped_at_max_sleep():
    t = tracker()
    t.on_stated_limit(RateLimitInfo(remaining=0, reset_after=100_000.0), 0.0, WALL)
    assert t.gate(0.0, WALL) == Policy().max_sleep


def test_stale_episode_is_closed_unrecovered():
    t = tracker()
    reject(t, "10", at=0.0)
    reject(t, "10", at=7 * 3600.0)
    assert len(t.state.observations) == 1
    assert t.state.observations[0].recovered is None
    assert t.episode is not None
    assert t.episode.start_mono == 7 * 3600.0


def test_the_engine_reads_its_thresholds_from_its_tuning():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TUNING.countdown_probe = 5.0  # type: ignore[misc]
    slow = HostTracker(
        HostState("h"), Policy(), random.Random(0), tuning=Tuning(countdown_probe=7.0)
    )
    assert reject(slow, "3600").wait == 7.0
    assert reject(tracker(), "3600").wait == TUNING.countdown_probe


@pytest.mark.parametrize("before", [None, "30"], ids=["maintenance", "after a window"])
def test_a_countdown_is_obeyed_even_where_the_header_was_judged_unreliable(before):
    # A maintenance answering 503 with the seconds to its end, counting down: evidence in the
    # episode beats the host's category, so the host is waited out (here held: 500 s is more
    # than max_sleep), not probed every two seconds for ten minutes. It may come right after
    # a window's 429 whose header pointed at an earlier reset. On a host judged unreliable
    # the countdown must count twice (see the test below): one more short probe.
    t = tracker("unreliable")
    at = 0.0
    if before is not None:
        at += reject(t, before).wait
    attempt, end = 2, at + 500
    for _ in range(2):
        d = reject(t, str(int(end - at)), at=at, status=503, attempt=attempt)
        assert not d.trusted
        at, attempt = at + d.wait, attempt + 1
    d = reject(t, str(int(end - at)), at=at, status=503, attempt=attempt)
    assert d.trusted
    assert d.event == "hold"
    assert "counts down" in d.reason


def test_on_an_unreliable_host_two_headers_that_agree_by_chance_are_no_countdown():
    # Drawn at random from 0..120 s, 110 and then 108 a second later agree within the
    # rounding (once in forty): on a host whose headers were judged unreliable that is
    # expected, and obeyed it cost a 60 s window 108 s. Where nothing was judged yet, two
    # are enough (an hourly quota must be held after at most two rejections).
    t = tracker("unreliable")
    reject(t, "110")
    d = reject(t, "108", at=1.0, attempt=2)
    assert not d.trusted
    assert d.wait < 10.0
    fresh = tracker()
    reject(fresh, "110")
    assert reject(fresh, "108", at=1.0, attempt=2).trusted


def test_a_header_the_host_missed_that_then_moves_is_only_a_hint():
    # Obeyed for 46 s, the host still refused and asked for 60 more: the header was shown
    # wrong in this episode, so the 60 is a hint (own backoff's search goes on), not a wait.
    t = tracker()
    first = reject(t, "46")
    assert first.trusted
    d = reject(t, "60", at=46.0, attempt=2)
    assert not d.trusted
    assert d.wait <= 2.0  # own backoff's second step: at most 2 s
    # A header rounded down, missed by a second, points at about the same moment again; one
    # that says the same again may be a window shared with other clients (or a constant lie,
    # judged from the recovery).
    for again in ("1", "46"):
        t = tracker()
        reject(t, "46")
        assert reject(t, again, at=46.0, attempt=2).trusted


def test_an_unreliable_header_never_takes_a_retry_past_the_search():
    # Without a recovery seen, own backoff is a doubling search: each retry comes at most
    # twice as far into the episode as the last, so the first success comes at most twice
    # as late as the recovery. A header counted as a hint moves a retry later within the
    # search's step, never past it (stretched to twice own backoff, a retry came 40 s after
    # 59 s of refusals).
    t = tracker("unreliable")
    at, attempt = 0.0, 1
    for header in ("13", "78", "89", "96", "83", "67", "101", "92"):
        d = reject(t, header, at=at, attempt=attempt)
        assert not d.trusted
        assert d.wait <= max(Policy().min_sleep, at, 2.0 ** (attempt - 1)) + 1e-9
        at, attempt = at + d.wait, attempt + 1
    assert at > 60.0


def _window(t: HostTracker, opened: float, reset_after: float, limit: int = 5) -> float:
    """A window of ``limit`` answered at ``opened`` (its first answer states ``reset_after``)
    run out at once; return the wait the tracker asks for before the next request."""
    t.on_success(opened, WALL + opened)
    t.on_stated_limit(
        RateLimitInfo(limit=limit, remaining=limit - 1, reset_after=reset_after),
        opened,
        WALL + opened,
    )
    for left in range(limit - 2, -1, -1):
        t.on_success(opened, WALL + opened)
        t.on_stated_limit(
            RateLimitInfo(limit=limit, remaining=left, reset_after=reset_after),
            opened,
            WALL + opened,
        )
    return t.gate(opened, WALL + opened)


def test_windows_opened_at_one_phase_are_probed_once_at_the_whole_second():
    # 1 s windows, each opened 0.01 s after a whole second, their reset stated as an epoch
    # second rounded up: 1.99 s after each first answer. The first window of the run says
    # nothing of the length (it may have opened anywhere in a window on the clock); the one
    # opened as it ran out bounds the length to (0.99, 1.99], and it is probed at 1 s (plus
    # the margin), not waited for 1.99 s.
    t = tracker()
    margin = t.tuning.reset_margin
    assert _window(t, 0.0, 1.99) == pytest.approx(1.99)  # the stated reset
    assert _window(t, 2.0, 1.99) == pytest.approx(1.0 + margin)  # the probe
    # The probe passed: the window is 1 s long, and the next ones are waited for so long.
    opened = 3.0 + margin
    assert _window(t, opened, 2.0 - opened % 1) == pytest.approx(1.0 + margin)
    opened += 1.0 + margin
    assert _window(t, opened, 2.0 - opened % 1) == pytest.approx(1.0 + margin)


def _refused_probe(t: HostTracker) -> None:
    """Windows of 2 s on the clock, each opened just after it starts: they look like 1 s
    windows opened just after a whole second until the probe at 1 s is refused."""
    _window(t, 0.0, 1.99)
    probe = _window(t, 2.0, 1.99)
    assert probe < 1.99
    reject(t, "1", at=2.0 + probe)
    t.on_success(4.0, WALL + 4.0)


def test_a_refused_probe_stops_predicting_resets():
    t = tracker(tuning=NO_TRIALS)
    _refused_probe(t)
    assert _window(t, 6.01, 1.99) == pytest.approx(1.99)
    assert _window(t, 8.01, 1.99) == pytest.approx(1.99)
    assert _window(t, 10.01, 1.99) == pytest.approx(1.99)


def test_a_refused_probe_answers_its_try_only_and_the_statements_pace_counts_on():
    # The refusal says the prediction was wrong, nothing of the pace the statements give:
    # the run-outs before it count towards a trial of an even pace, which comes as it would
    # have without the probe (counted afresh, it came two windows later: on limits' sliding
    # window counter, whose stated resets run a second late, at half the host's rate).
    t = tracker()
    _refused_probe(t)
    assert "evenly" not in t.pacing_reason()
    # The run's first run-out ends its opening burst and does not count; the probe's does.
    for i in range(t.tuning.trial_after - 1):
        assert _window(t, 6.01 + 2.0 * i, 1.99) == pytest.approx(1.99)
    assert "evenly" in t.pacing_reason()


def test_resets_stated_in_seconds_from_now_need_no_prediction():
    # draft-6's RateLimit-Reset counts from the answer: the first answer of a 1 s window
    # states 1 exactly, so its bounds (0, 1] leave no whole second to probe, and the wait is
    # the stated reset, which is exact.
    t = tracker()
    for opened in (0.0, 1.01, 2.02, 3.03):
        assert _window(t, opened, 1.0) == pytest.approx(1.0)


def test_windows_whose_first_answers_disagree_are_not_predicted():
    # Windows of 10 s opened at their reset, then a pause and one opened mid-window (4 s
    # before its stated reset, a window on the clock): the bounds (9 - 0.02, 9.98] and
    # (3, 4] disagree, so the window after them waits for its stated reset. (No even pace
    # is tried here: the statements' pace over these windows counts the pause, and a trial
    # paces the host instead of its statements.)
    t = tracker(tuning=NO_TRIALS)
    _window(t, 0.0, 9.98)
    _window(t, 10.0, 9.98)
    _window(t, 20.0, 9.98)
    _window(t, 36.0, 4.0)
    assert _window(t, 40.02, 9.98) == pytest.approx(9.98)


def test_a_window_length_a_probe_showed_is_kept_and_starts_the_next_run():
    t = tracker()
    margin = t.tuning.reset_margin
    for opened in (0.0, 2.0, 4.0):
        _window(t, opened, 1.99)
    _window(t, 5.05, 1.94)  # the probe at 4.0 + 1 s passed
    limit = t.state.limit
    assert limit is not None
    assert (limit.source, limit.window, limit.rate, limit.documented) == ("stated", 1.0, 5.0, 5.0)
    # The next run (a new tracker on the stored state) predicts its first window already.
    again = HostTracker(t.state, Policy(), random.Random(0))
    assert _window(again, 0.0, 1.99) == pytest.approx(1.0 + margin)


def test_a_moving_window_waits_for_the_place_its_oldest_request_frees():
    # A moving window of 5 per 1 s (its length kept from an earlier run), run out by a burst
    # at 0.00-0.04, its reset stated as an epoch second rounded up (2.0). Its first request
    # leaves at 1.0, and the next goes a margin later; the answer to it counts the four
    # others too and says remaining=0 again. The place that frees next is the one the request
    # at 0.01 holds: at 1.01, waited for until 1.06, not until the stated reset.
    t = tracker(limit=LimitEstimate(rate=5.0, window=1.0, documented=5.0, source="stated"))
    margin = t.tuning.reset_margin

    def answer(at: float, left: int) -> float:
        t.on_success(at, WALL + at)
        info = RateLimitInfo(limit=5, remaining=left, reset_after=2.0 - at)
        t.on_stated_limit(info, at, WALL + at, sent=at - 0.001)
        return t.gate(at, WALL + at)

    for i, left in enumerate((4, 3, 2, 1)):
        assert answer(0.01 * i, left) == 0
    assert answer(0.04, 0) == pytest.approx(1.0 + margin - 0.04)
    again = 1.0 + margin + 0.001
    assert answer(again, 0) == pytest.approx(1.01 + margin - again)


def test_a_predicted_reset_never_comes_before_the_window_frees_when_answers_lag():
    # Windows of 5 per 1 s opened at a request, the reset an epoch second rounded up. The
    # host counts a request somewhere between its send and its answer: the first request of
    # the second window was counted 50 ms before its answer (a slow answer), that of the
    # third at once. Bounds counted from answers alone take the second window for at most
    # 0.955 s (its reset, 3.0, less its answer), which the third contradicts: no prediction.
    # Counted from sends, they agree on about 1 s, and the third is predicted, not early.
    t = tracker()

    def window(sent: float, counted: float, answered: float) -> float:
        reset = math.ceil(counted + 1.0)
        for left in (4, 3, 2, 1, 0):
            t.on_success(answered, WALL + answered)
            info = RateLimitInfo(limit=5, remaining=left, reset_after=reset - answered)
            t.on_stated_limit(info, answered, WALL + answered, sent=sent)
            sent = counted = answered
        return answered + t.gate(answered, WALL + answered)

    assert window(0.0, 0.0, 0.0) == pytest.approx(1.0)  # the run's first: its stated reset
    window(1.99, 1.995, 2.045)
    assert 3.001 + 1.0 <= window(3.0, 3.001, 3.002) < 5.0  # 5.0: the stated reset


def test_windows_another_client_counts_in_are_waited_for_until_their_stated_reset():
    # Windows of 5 per 1 s opened at a request (a length a probe showed in an earlier run),
    # the reset an epoch second rounded up. The first, opened at 0.3, runs out at 0.7 and is
    # predicted to free at 1.31. In the second, opened then, another client's request comes
    # between two of this run's: remaining falls from 3 to 1. Counted back over this run's
    # requests alone, the window would seem to free at 1.71 (0.7 + 1 s); it frees at 2.31.
    t = tracker(limit=LimitEstimate(rate=5.0, window=1.0, documented=5.0, source="stated"))
    margin = t.tuning.reset_margin

    def answer(at: float, left: int, reset: float) -> float:
        t.on_success(at, WALL + at)
        info = RateLimitInfo(limit=5, remaining=left, reset_after=reset - at)
        t.on_stated_limit(info, at, WALL + at, sent=at)
        return at + t.gate(at, WALL + at)

    for at, left in zip((0.3, 0.4, 0.5, 0.6, 0.7), (4, 3, 2, 1, 0)):
        freed = answer(at, left, 2.0)
    assert freed == pytest.approx(1.3 + margin)
    for at, left in zip((freed, 1.4, 1.5, 1.6), (4, 3, 1, 0)):
        freed = answer(at, left, 3.0)
    assert freed == pytest.approx(3.0)  # the stated reset


@pytest.mark.parametrize(("share", "waited"), [(1, 8.01), (2, 9.99)])
def test_windows_are_not_predicted_while_workers_share_the_host(share, waited):
    # Windows of 8 s (shorter ones workers send on their shared schedule), a reset stated
    # 9.99 s ahead: a worker alone predicts the place its oldest request frees, workers
    # sharing the host wait for the reset stated.
    t = tracker(limit=LimitEstimate(rate=5 / 8, window=8.0, documented=5 / 8, source="stated"))
    t.share = share  # another worker's requests count in the same windows
    for left in (4, 3, 2, 1, 0):
        t.on_success(0.0, WALL)
        t.on_stated_limit(RateLimitInfo(limit=5, remaining=left, reset_after=9.99), 0.0, WALL)
    assert t.gate(0.0, WALL) == pytest.approx(waited, abs=0.02)


def test_an_obeyed_wait_at_the_floor_is_jittered_only_for_workers_sharing_the_host():
    # A worker alone obeys "Retry-After: 1" to the floor exactly; workers sharing the host
    # would all retry at that moment together, so each stretches it at random, as own
    # backoff is.
    alone = [
        reject(
            HostTracker(
                HostState("api.example.org", category="truthful"), Policy(), random.Random(seed)
            ),
            "1",
        ).wait
        for seed in range(5)
    ]
    assert alone == [Policy().min_sleep] * 5
    shared = []
    for seed in range(5):
        workers = (("me", WALL), ("other", WALL), ("third", WALL))
        t = HostTracker(
            HostState("api.example.org", category="truthful", workers=workers),
            Policy(),
            random.Random(seed),
            "me",
        )
        t.workers.count(WALL)
        d = reject(t, "1")
        assert d.trusted
        shared.append(d.wait)
    top = Policy().min_sleep * (1 + t.tuning.jitter)
    assert all(Policy().min_sleep <= w <= top for w in shared)
    assert len(set(shared)) == 5


def _sharing(me: str, **state) -> HostTracker:
    """The tracker of worker ``me`` of four that share the host (as counted from a store)."""
    workers = tuple((w, WALL) for w in ("w0", "w1", "w2", "w3"))
    t = HostTracker(
        HostState("api.example.org", workers=workers, **state), Policy(), random.Random(0), me
    )
    t.workers.count(WALL)
    return t


def test_workers_sharing_a_hosts_wait_come_back_from_it_in_turns():
    # Another worker's refusal set the host's wait until WALL + 1 and no schedule paces the
    # host yet: all four back at once, a bucket without a burst would let one through and
    # refuse three. Each comes back at a moment of its own, all within one floor.
    ends = []
    for me in ("w0", "w1", "w2", "w3"):
        t = _sharing(me, blocked_until=WALL + 1.0, blocked_since=WALL)
        assert t.share == 4
        ends.append(t.gate(0.0, WALL))
    assert min(ends) == pytest.approx(1.0)
    assert max(ends) < 1.0 + Policy().min_sleep
    gaps = sorted(b - a for a, b in zip(sorted(ends), sorted(ends)[1:]))
    assert gaps[0] >= Policy().min_sleep / 8, ends
    # Once the wait is over (by more than a floor), nobody waits for a turn.
    assert _sharing("w3", blocked_until=WALL + 1.0, blocked_since=WALL).gate(2.0, WALL + 2) == 0


def test_workers_that_look_again_as_the_hosts_wait_ends_still_come_back_in_turns():
    # Four workers refused together each chose its own wait (the floor) before it knew of the
    # others; woken as it ends, each looks again. Its turn counts from the host's wait's end,
    # not from the moment it looks: all back at once, one got through and three were refused.
    floor = Policy().min_sleep
    for looks in (1.0, 1.2):
        backs = []
        for me in ("w0", "w1", "w2", "w3"):
            t = _sharing(me, blocked_until=WALL + 1.0, blocked_since=WALL)
            backs.append(looks + t.gate(looks, WALL + looks))
        # Rank r of 4 comes back r/4 of the floor after the wait's end (or at once, if
        # that is past).
        turns = [1.0 + floor * rank / 4 for rank in range(4)]
        assert sorted(backs) == pytest.approx([max(looks, at) for at in turns]), (looks, backs)
        # Asked on the wall clock alone (no monotonic reading: a report, a clock without
        # one), the turns are the same.
        walls = []
        for me in ("w0", "w1", "w2", "w3"):
            t = _sharing(me, blocked_until=WALL + 1.0, blocked_since=WALL)
            walls.append(looks + t.gate_keeper.check(WALL + looks, None)[2])
        assert sorted(walls) == pytest.approx(sorted(backs)), (looks, walls)


def test_a_worker_whose_first_request_was_refused_learns_from_its_recovery():
    # The host's budget was spent before this worker's first request (by the others): it
    # was refused, and the host let its first retry through. Nothing learned, it would send
    # the next request at once, and a bucket without a burst refuses it (a wait for every
    # worker). The recovery went through: one request per worker in that time, a lower
    # bound, searched upward.
    t = _sharing("w1")
    reject(t, "0", at=0.0)
    t.on_success(1.0, WALL + 1.0)
    limit = t.state.limit
    assert limit is not None
    assert limit.rate == pytest.approx(4.0, rel=0.01)
    assert limit.shares == 4  # one request times the workers: a guess
    assert t.pacer.probes.searching()


def _recovered(t: HostTracker, headers: List[str], recovered_at: float) -> Optional[LimitEstimate]:
    """The limit ``t`` knows after its first request was refused with each of ``headers``
    in turn (each retry after the wait decided) and let through at ``recovered_at``, or at
    the end of the last wait if that is later."""
    now = 0.0
    for attempt, header in enumerate(headers, 1):
        now += reject(t, header, at=now, attempt=attempt).wait
    now = max(now, recovered_at)
    t.on_success(now, WALL + now)
    return t.state.limit


def test_a_first_request_refused_teaches_nothing_where_it_does_not_show_a_budget():
    # Not a client alone (a stray refusal of its first request is not a limit, and a limit
    # learned so would keep a budget the host states from counting).
    assert _recovered(tracker("always_zero"), ["0"], 1.0) is None
    # Not a recovery that took a second retry (a longer window, whose budget is not one
    # request), nor one past a short window's length, nor one at an obeyed header's end
    # (that marks a window's start, not a refill).
    assert _recovered(_sharing("w1"), ["0", "0"], 0.0) is None
    assert _recovered(_sharing("w1"), ["0"], 6.0) is None
    assert _recovered(_sharing("w1", category="truthful"), ["3"], 0.0) is None
    # Nor once a limit was learned: it stands.
    known = LimitEstimate(6.0, 10.0, burst=60, updated_at=WALL)
    kept = _recovered(_sharing("w1", limit=known), ["0"], 1.0)
    assert kept is not None
    assert kept.burst == 60


def test_a_retry_refused_at_a_shared_probes_rate_waits_a_gap_not_a_doubled_backoff():
    # Four workers search a bucket's rate together: 8 a second holds, 16 is being tried. A
    # call refused (its retry after the floor refused again, at the probe's rate) has seen
    # the probe's answer, not a host refusing for longer: it waits one gap of the schedule,
    # floored, as at its first refusal, not a doubled backoff that stops every worker.
    limit = LimitEstimate(rate=8.0, window=1.0, burst=8, even=True, updated_at=WALL)
    probe = Search(rate=16.0, held=8.0, since=WALL - 5.0, lower=True)
    # Recoveries of 3 s seen before the workers took turns (each behind the others).
    seen = tuple(
        Observation(at=WALL - 60.0 + i, status=429, header=0.0, recovered=3.0) for i in range(3)
    )
    t = _sharing("w1", limit=limit, search=probe, category="always_zero", observations=seen)
    assert t.pacer.send_gap() is not None
    first = reject(t, "0", at=0.0)
    assert first.wait <= Policy().min_sleep * (1 + t.tuning.jitter)
    again = reject(t, "0", at=first.wait + 0.01, attempt=2)
    assert again.wait <= Policy().min_sleep * (1 + t.tuning.jitter), again.reason


def test_an_obeyed_header_at_the_floor_bounds_a_bucket_from_below_but_marks_a_window_start():
    # One request through, the next refused with "Retry-After: 1", through again after it:
    # a bucket whose refill the header rounded up to the floor. Its budget is a lower bound
    # (searched upward), and a bucket's refill has no start to anchor windows to.
    bucket = tracker("truthful")
    bucket.on_success(0.0, WALL)
    reject(bucket, "1", at=0.01)
    bucket.on_success(1.01, WALL + 1.01)
    assert bucket.state.limit is not None
    assert bucket.state.limit.even
    assert bucket.state.limit.anchor is None
    assert bucket.pacer.probes.searching()
    # Twenty through, then "Retry-After: 1" as a window ends within the second: that
    # window's start is the end of the wait (within the header's second), as before.
    window = tracker("truthful")
    for i in range(20):
        window.on_success(i * 0.01, WALL + i * 0.01)
    reject(window, "1", at=0.2)
    window.on_success(1.2, WALL + 1.2)
    assert window.state.limit is not None
    assert not window.state.limit.even
    assert window.state.limit.anchor == pytest.approx(WALL + 1.2)
