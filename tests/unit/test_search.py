"""The shared search's transitions (issue #10, item 7): pure functions of a search and time."""

from __future__ import annotations

import pytest

from requests_retryafter import HostState, LimitEstimate
from requests_retryafter._search import (
    advanced,
    early,
    from_stated,
    on_refusal,
    refused,
    searching,
    seeded,
    take_send,
    within,
)
from requests_retryafter.state import MAX_COUNT, MIN_SEARCH_RATE, Search
from requests_retryafter.tuning import TUNING

T = TUNING
DEPTH, LEAST = 1.0, 1.0
#: The schedule's options of four workers (``on_refusal``'s), and ``take_send``'s with them.
SHARED = {"max_sleep": 300.0, "share": 4}
SEND = {"depth": DEPTH, "min_sleep": 1.0, "tuning": T, "utilization": 0.95, **SHARED}


def _run(search: Search, start: float, seconds: float, rate_of_sends: float) -> Search:
    """Advance ``search`` as workers taking a slot ``rate_of_sends`` times a second would."""
    steps = int(seconds * rate_of_sends)
    for i in range(steps):
        search = advanced(search, start + i / rate_of_sends, DEPTH, LEAST, T)
        search = Search(**{**search.to_dict(), "sends": search.sends + 1})
    return search


def test_a_limit_one_worker_learned_is_a_guess_probed_from_its_take_and_a_searched_one_holds():
    # A limit one worker learned among four is what it got through times the workers: its
    # own take held (a lower bound of the host's rate), and the guess is the first probe.
    learned = LimitEstimate(rate=4.0, window=1.0, burst=4, by="w1", shares=4)
    assert seeded(learned, 10.0) == Search(4.0, 1.0, since=10.0, lower=True)
    # Learned alone, it held: a lower bound, doubled once it held a window.
    alone = LimitEstimate(rate=4.0, window=1.0, burst=4, by="w1")
    assert seeded(alone, 10.0) == Search(4.0, 4.0, since=10.0, lower=True)
    left = LimitEstimate(rate=9.0, window=1.0, burst=9)
    assert seeded(left, 10.0) == Search(9.0, 9.0, since=10.0, lower=False)


def test_a_guess_refused_takes_the_search_back_to_the_take_that_held():
    # One worker got a bucket's whole burst through before the others sent, and guessed
    # 24 a second for four workers against a host allowing 10.
    over = seeded(LimitEstimate(rate=24.0, window=1.0, burst=24, by="w1", shares=4), 0.0)
    cut = refused(over, slot_at=0.5, wall=0.5, tuning=T)
    assert (cut.rate, cut.held, cut.ceiling) == (6.0, 6.0, 24.0)
    assert searching(cut, T)
    # It bisects between them, and never above the guess.
    probed = _run(cut, 0.5, 1.5, 20.0)
    assert probed.rate == pytest.approx((6.0 * 24.0) ** 0.5)
    # A guess that held is doubled at once, as any lower bound that held.
    held = _run(over, 0.0, 1.5, 30.0)
    assert (held.held, held.rate) == (24.0, 48.0)


def test_a_guess_leaves_the_learned_limit_stored_until_a_rate_holds():
    # A worker left alone (or the next run) paces from the stored limit: the take that held
    # is only a bound of the host's rate, so the guess stays the limit until the probe is
    # answered; refused, the take that held is the limit.
    guess = LimitEstimate(rate=8.0, window=1.0, burst=8, by="w1", shares=4)
    state, _ = take_send(HostState("h", limit=guess), guess, 100.0, **SEND)
    assert state.search is not None
    assert (state.search.rate, state.search.held) == (8.0, 2.0)
    assert state.limit == guess
    # Not yet stored (the worker's own): the guess is stored with the search.
    fresh, _ = take_send(HostState("h"), guess, 100.0, **SEND)
    assert fresh.limit == guess
    slot = state.search.since
    cut = on_refusal(state, None, slot, slot + 0.01, T, **SHARED)
    assert cut.limit is not None
    assert cut.limit.rate == 2.0
    assert not cut.limit.by
    assert cut.limit.shares == 1  # the workers' rate together, no guess


def test_a_budget_the_host_states_is_paced_below_it_as_one_client_paces_a_stated_rate():
    stated = LimitEstimate(rate=20.0, window=1.0, burst=20, source="stated")
    search = from_stated(stated, 10.0, 0.95)
    assert search.rate == search.held == search.most == pytest.approx(19.0)
    assert search.ceiling == 20.0  # the stated rate bounds it, as a rate refused would
    assert not search.lower
    assert not searching(search, T)  # already within the search's gap of the stated rate
    # For a window the host still counts what the workers sent before the schedule: a
    # refusal then answers that, not the rate.
    assert refused(search, 10.9, 10.9, T) == search
    # A refusal at that rate later (another client counted there too) cuts it; the search
    # then bisects back up, staying below the stated rate.
    cut = refused(search, 11.0, 11.0, T)
    assert cut.held < search.held
    assert searching(cut, T)
    probed = _run(cut, 11.0, 20.0, 20.0)
    assert cut.held < probed.held <= 19.0
    # With nothing refused, the search tries no more than it started at (``utilization``
    # of the stated rate, the most the workers send): the host counts every client's
    # requests against its budget.
    later = search
    for start in range(10, 610, 60):
        later = _run(later, float(start), 60.0, 20.0)
        assert later.rate <= 19.0
    assert later.held == pytest.approx(19.0)


def test_a_search_is_kept_within_what_the_host_states_now():
    stated = LimitEstimate(rate=20.0, window=1.0, burst=20, source="stated")
    # A search past the budget (an earlier version's, or a limit halved since) comes down to
    # it, with the stated rate as its ceiling, and its ``since`` does not move back.
    past = Search(rate=24.0, held=22.0, ceiling=0.0, since=50.0, sends=30)
    down = within(past, stated, 0.95, 40.0)
    assert (down.rate, down.held, down.ceiling, down.most) == (19.0, 19.0, 20.0, 19.0)
    assert down.since == 50.0
    # One below it only learns the bound, and bisects up to it after a cut.
    low = Search(rate=8.0, held=8.0, since=0.0, lower=True)
    bounded = within(low, stated, 0.95, 40.0)
    assert (bounded.rate, bounded.ceiling, bounded.most) == (8.0, 20.0, 19.0)
    assert _run(bounded, 40.0, 60.0, 20.0).held == pytest.approx(19.0, rel=0.1)


def test_a_worker_that_has_not_read_the_statements_keeps_to_the_stored_bound():
    stated = LimitEstimate(rate=20.0, window=1.0, burst=20, source="stated")
    state, _ = take_send(HostState("h"), None, 0.0, stated=stated, **SEND)
    # Long after, workers that know nothing of the statements yet (``stated`` is None) send:
    # the search stays at the bound the statements set.
    for i in range(1, 20 * 120):
        state, _ = take_send(state, None, 1.0 + i / 19.0, **SEND)
        assert state.search is not None
        assert state.search.rate <= 19.0


def test_a_refusal_in_the_stated_search_s_first_window_answers_what_went_before_it():
    # The workers burst on their own before they knew of each other; the host counts those
    # requests for a window after the schedule starts (a fixed window they opened refused
    # its first slots): such a refusal cuts nothing. One after that window does.
    stated = LimitEstimate(rate=20.0, window=1.0, burst=20, source="stated")
    state, slot = take_send(HostState("h"), None, 100.0, stated=stated, **SEND)
    assert slot == 100.0  # (a window's limiter refuses no request for following another)
    early = on_refusal(state, None, slot, slot + 0.05, T, **SHARED)
    assert early.search == state.search
    later = on_refusal(state, None, 101.0, 101.05, T, **SHARED)
    assert later.search is not None
    assert later.search.held < 19.0


def test_a_new_schedule_s_first_slot_comes_a_gap_after_the_requests_sent_before_it():
    # A worker learns a limit from its own recovery and starts the schedule at once: that
    # recovered request went a moment before, off the schedule, and a bucket without a
    # burst refuses a request that follows it closer than a gap. So the first slot is a gap
    # off; its refusal (other workers' requests off the schedule) says nothing of the rate,
    # and the rate counts from the second slot.
    learned = LimitEstimate(rate=4.0, window=1.0, burst=4, by="w1")
    state, slot = take_send(HostState("h", limit=learned), learned, 100.0, **SEND)
    assert slot == pytest.approx(100.0 + 1.0 / 4.0)
    first = on_refusal(state, None, slot, slot + 0.005, T, **SHARED)
    assert first.search == state.search
    state, second = take_send(state, learned, slot, **SEND)
    assert second == pytest.approx(slot + 1.0 / 4.0)
    cut = on_refusal(state, None, second, second + 0.005, T, **SHARED).search
    assert cut is not None
    assert cut.held < 4.0
    # A schedule already ahead (another worker's clock, or a search that was dropped): the
    # first slot is the one taken, not the moment it was taken.
    ahead = HostState("h", limit=learned, next_send=100.5)
    state, slot = take_send(ahead, learned, 100.0, **SEND)
    assert slot == 100.5
    assert on_refusal(state, None, slot, slot + 0.005, T, **SHARED).search == state.search


def test_a_search_not_yet_stored_starts_from_the_stated_budget_rather_than_a_learned_one():
    learned = LimitEstimate(rate=4.0, window=1.0, burst=4, by="w1")
    stated = LimitEstimate(rate=20.0, window=1.0, burst=20, source="stated")
    state, _ = take_send(HostState("h", limit=learned), learned, 0.0, stated=stated, **SEND)
    assert state.search is not None
    assert state.search.ceiling == 20.0
    assert state.search.rate == pytest.approx(0.95 * 20.0)
    # A search already stored (an earlier run's, or another worker's) goes on from where
    # it is, within what the host states now: a budget stated lower brings it down.
    again, _ = take_send(state, learned, 0.5, stated=LimitEstimate(rate=5.0, window=1.0), **SEND)
    assert again.search is not None
    assert again.search.rate == again.search.ceiling * 0.95 == pytest.approx(4.75)


def test_a_lower_bound_doubles_until_refused_then_bisects():
    search = Search(rate=1.0, held=1.0, since=0.0, lower=True)
    # A probe starts once the rate held for the hold, and each probe that held is doubled.
    search = _run(search, 0.0, 1.5, 20.0)
    assert (search.held, search.rate) == (1.0, 2.0)
    search = _run(search, 1.5, 1.5, 20.0)
    assert (search.held, search.rate) == (2.0, 4.0)
    # Refused: the rate that held stands, and the refused one bounds the search.
    search = refused(search, slot_at=3.4, wall=3.5, tuning=T)
    assert (search.rate, search.held, search.ceiling) == (2.0, 2.0, 4.0)
    assert searching(search, T)
    search = _run(search, 3.5, 1.5, 20.0)
    assert search.rate == pytest.approx((2.0 * 4.0) ** 0.5)


def test_a_rate_a_refusal_cuts_counts_from_the_end_of_the_host_s_wait():
    # The workers wait out the refusal (the floor, here) before any request goes at the rate
    # it cut: that rate must hold a window of requests before the next probe, not a window
    # of the wait.
    state = HostState("h", search=Search(rate=8.0, held=8.0, since=2.0, lower=True, sends=30))
    cut = on_refusal(state, None, 5.0, 5.0, T, resume=6.0, **SHARED).search
    assert cut is not None
    assert (cut.rate, cut.held, cut.since) == (6.0, 6.0, 6.0)
    assert advanced(cut, 6.5, DEPTH, LEAST, T) == cut
    assert _run(cut, 6.0, 1.3, 8.0).probing
    # Counted from the refusal, the wait was the window, and the rate went untried.
    at_refusal = on_refusal(state, None, 5.0, 5.0, T, **SHARED).search
    assert at_refusal is not None
    assert advanced(at_refusal, 6.0, DEPTH, LEAST, T).probing
    # A refused probe goes back to the rate that held, which needs no new trial: the next
    # probe may follow the wait.
    probing = HostState("h", search=Search(rate=8.0, held=4.0, since=0.0, ceiling=16.0))
    back = on_refusal(probing, None, 5.0, 5.0, T, resume=6.0, **SHARED).search
    assert back is not None
    assert (back.rate, back.held, back.ceiling) == (4.0, 4.0, 8.0)
    assert back.since < 6.0
    # A worker woken a hair before the wait's end takes its slot as the rate starts: its
    # refusal answers that rate.
    hair = on_refusal(state.replace(search=cut), None, 5.9995, 6.0, T, resume=7.0, **SHARED)
    assert hair.search is not None
    assert hair.search.held < cut.held
    # A refusal that changes nothing (its slot was at an earlier rate) moves nothing.
    assert (
        on_refusal(state.replace(search=cut), None, 5.5, 5.6, T, resume=6.6, **SHARED).search == cut
    )


def test_a_probe_holds_only_once_a_holds_worth_of_requests_went_at_it():
    search = Search(rate=2.0, held=1.0, since=0.0, lower=True)
    # Long past the hold, but nobody sent (the workers waited out another refusal).
    assert advanced(search, 100.0, DEPTH, LEAST, T) == search
    sent = Search(**{**search.to_dict(), "sends": 3})
    assert advanced(sent, 100.0, DEPTH, LEAST, T).held == 2.0


def test_one_refusal_event_is_one_decrease():
    search = Search(rate=8.0, held=8.0, since=0.0)
    once = refused(search, slot_at=5.0, wall=6.0, tuning=T)
    assert once.held < search.held
    # The other workers' requests, scheduled before that decrease, change nothing more.
    assert refused(once, slot_at=5.9, wall=6.1, tuning=T) == once
    # One scheduled after it is news again.
    assert refused(once, slot_at=6.2, wall=6.3, tuning=T).held < once.held


def test_a_retry_refused_again_ends_a_probe_but_decreases_nothing():
    probing = Search(rate=10.0, held=8.0, since=0.0)
    ended = refused(probing, slot_at=1.0, wall=1.1, tuning=T, first=False)
    assert (ended.rate, ended.held, ended.ceiling) == (8.0, 8.0, 10.0)
    steady = Search(rate=8.0, held=8.0, since=0.0)
    assert refused(steady, slot_at=1.0, wall=1.1, tuning=T, first=False) == steady


def test_after_the_search_probes_are_rare_and_rarer_after_each_refused_one():
    over = Search(rate=9.0, held=9.0, ceiling=9.2, since=0.0)
    assert not searching(over, T)
    assert advanced(over, T.probe_min_seconds - 1, DEPTH, LEAST, T) == over
    probe = advanced(over, T.probe_min_seconds, DEPTH, LEAST, T)
    assert probe.rate == pytest.approx(9.0 * (1 + T.probe_step))
    missed = refused(probe, slot_at=probe.since, wall=probe.since + 1, tuning=T)
    assert missed.misses == 1
    later = missed.since + 2 * T.probe_min_seconds
    assert advanced(missed, later - 1, DEPTH, LEAST, T) == missed
    assert advanced(missed, later, DEPTH, LEAST, T).probing


def test_after_the_search_a_probe_tries_the_rates_below_the_refused_one_before_it_again():
    # The search ended at 9.47 with 9.95 refused: a step up (9.94) would ask for the
    # refused rate again; the probe goes halfway to it, where nothing was tried.
    ended = Search(rate=9.47, held=9.47, ceiling=9.95, since=0.0)
    assert not searching(ended, T)
    probe = advanced(ended, T.probe_min_seconds, DEPTH, LEAST, T)
    assert probe.rate == pytest.approx((9.47 * 9.95) ** 0.5)
    assert ended.held < probe.rate < ended.ceiling
    # Kept, it is the rate that holds, and the next probe halves the rest of the way while
    # that is more than half a step; then it steps up, past the refused rate.
    kept = advanced(Search(**{**probe.to_dict(), "sends": 1000}), 30.0, DEPTH, LEAST, T)
    assert (kept.held, kept.ceiling) == (probe.rate, 9.95)
    near = Search(rate=9.9, held=9.9, ceiling=9.95, since=0.0)
    stepped = advanced(near, T.probe_min_seconds, DEPTH, LEAST, T)
    assert stepped.rate == pytest.approx(9.9 * (1 + T.probe_step))


def test_a_rate_refused_after_it_held_steps_down_and_one_refused_again_soon_is_cut():
    # Near the host's rate a refusal comes at random (a request late by a few milliseconds,
    # then one on time): a rate that held for a probe's hold steps one probe_step down, as
    # a worker alone's window loses one request, and the ceiling stands.
    held = Search(rate=9.9, held=9.9, ceiling=10.3, since=0.0)
    late = T.spread_probe_hold
    step = refused(held, slot_at=late, wall=late, tuning=T)
    assert step.held == pytest.approx(9.9 / (1.0 + T.probe_step))
    assert (step.rate, step.ceiling) == (step.held, 10.3)
    assert step.held > held.held * T.spread_decrease
    # Refused again before the lower rate held as long, the rate is too fast (the host's
    # limit fell, another client came): cut by spread_decrease.
    soon = late + T.spread_probe_hold / 2
    again = refused(step, slot_at=soon, wall=soon, tuning=T)
    assert again.held == pytest.approx(step.held * T.spread_decrease)
    # So is a rate refused before it held that long at all.
    early = refused(held, slot_at=1.0, wall=1.0, tuning=T)
    assert early.held == pytest.approx(9.9 * T.spread_decrease)


def test_a_probe_that_reaches_the_ceiling_starts_the_search_over():
    probe = Search(rate=10.0, held=9.5, ceiling=10.0, since=0.0, sends=1000)
    held = advanced(probe, 60.0, DEPTH, LEAST, T)
    assert (held.held, held.ceiling, held.lower) == (10.0, 0.0, False)


def test_the_search_is_stored_and_merged_by_its_last_change():
    early = Search(rate=4.0, held=2.0, since=10.0, lower=True)
    late = Search(rate=2.0, held=2.0, ceiling=4.0, since=11.0, lower=True)
    a, b = HostState("h", search=early), HostState("h", search=late)
    assert a.merge(b).search == late
    assert b.merge(a).search == late
    assert HostState.from_json(b.to_json()).search == late
    with pytest.raises(ValueError):
        HostState.from_dict({**b.to_dict(), "search": {"rate": -1, "held": 1}})


def test_a_rate_cut_again_and_again_stops_where_the_store_and_a_sleep_can_keep_it():
    slow = Search(rate=MIN_SEARCH_RATE, held=MIN_SEARCH_RATE, since=0.0)
    assert refused(slow, slot_at=1.0, wall=2.0, tuning=T).held == MIN_SEARCH_RATE
    with pytest.raises(ValueError):
        Search.from_dict({**slow.to_dict(), "rate": MIN_SEARCH_RATE / 2})
    # However slow the rate, consecutive slots are at most max_sleep apart.
    limit = LimitEstimate(rate=1.0, window=1.0, burst=1)
    state = HostState("h", limit=limit, search=slow)
    kw = {**SEND, "share": 2}
    state, first = take_send(state, None, 10.0, **kw)
    state, second = take_send(state, None, 10.0, **kw)
    assert second - first == pytest.approx(300.0)
    # The count of sends stays one a store keeps.
    busy = state.replace(search=Search(**{**slow.to_dict(), "sends": int(MAX_COUNT)}))
    assert take_send(busy, None, 10.0, **kw)[0].search.sends == int(MAX_COUNT)


def test_a_new_rate_counts_from_its_first_slot_after_the_slots_taken_before_it():
    # Four workers at 1 request/s, each holding a slot ahead: the next free slot is at 14 s.
    limit = LimitEstimate(rate=1.0, window=1.0, burst=1)
    search = Search(rate=1.0, held=1.0, since=0.0, lower=True, sends=100)
    state = HostState("h", limit=limit, search=search, next_send=14.0)
    # At 10 s the rate has held long enough: the search doubles it. The slot is half a
    # second after the last one taken at 1/s (13 s), not a second after it, and the new
    # rate reaches the host from there.
    state, slot = take_send(state, None, 10.0, **SEND)
    assert state.search is not None
    assert state.search.rate == 2.0
    assert slot == pytest.approx(13.5)
    assert state.search.since == pytest.approx(13.5)
    # A request sent in a slot taken before the change was refused: the change answered it.
    assert on_refusal(state, None, 12.0, 12.1, T, **SHARED) == state
    # The probe holds a hold after its first slot, not a hold after the change (by then
    # no request had gone at its rate).
    for step in range(1, 18):  # 10.25 s to 14.25 s
        wall = 10.0 + step / 4
        state, _ = take_send(state, None, wall, **SEND)
        assert state.search is not None
        assert state.search.held == 1.0, wall
    state, _ = take_send(state, None, 14.6, **SEND)
    assert state.search is not None
    assert state.search.held == 2.0


def test_a_send_is_taken_no_further_ahead_than_the_floor_or_a_gap():
    # Four workers at half a request a second: the next free send is 5.5 s away. A worker
    # waits until it is a gap (2 s) away before taking it, so that few slots are held ahead
    # and a faster rate reaches the host soon (each slot taken keeps the rate it had).
    kw = {"min_sleep": 1.0, "max_sleep": 300.0, "share": 4}
    limit = LimitEstimate(rate=0.5, window=2.0, burst=1)
    state = HostState("h", limit=limit, search=Search(rate=0.5, held=0.5), next_send=15.5)
    assert early(state, None, 10.0, **kw) == pytest.approx(3.5)
    assert early(state, None, 13.5, **kw) == 0.0  # a gap away: taken now
    assert early(state, None, 13.4995, **kw) == 0.0  # within a millisecond of it
    assert early(state, None, 16.0, **kw) == 0.0  # the free send is past
    # Without a search there is no schedule to wait for; a next free send further off
    # than four rounds of the workers' turns is not believed (take_send starts it again).
    assert early(state.replace(search=None), None, 10.0, **kw) == 0.0
    assert early(state.replace(next_send=60.0), None, 10.0, **kw) == 0.0
    # At 4 requests a second the gap is shorter than the floor: a send is taken up to a
    # second ahead, so four workers at 5 a second or more never wait to take one.
    fast = state.replace(search=Search(rate=4.0, held=4.0), next_send=11.5)
    assert early(fast, None, 10.0, **kw) == pytest.approx(0.5)
    assert (
        early(fast.replace(search=Search(rate=5.0, held=5.0), next_send=10.8), None, 10.0, **kw)
        == 0.0
    )


def test_a_decrease_spaces_the_next_slot_at_the_lower_rate():
    limit = LimitEstimate(rate=8.0, window=1.0, burst=8)
    # (Set at 18 s, the rate had not held a probe's hold: cut by spread_decrease.)
    search = Search(rate=8.0, held=8.0, since=18.0)
    state = HostState("h", limit=limit, search=search, next_send=20.5)
    cut = on_refusal(state, None, 20.0, 20.1, T, **SHARED)
    assert cut.search is not None
    assert cut.search.held == pytest.approx(6.0)
    # The last slot taken was at 20.375 (an eighth of a second before the next free one);
    # the next is a sixth of a second after it, and refusals of slots before it change
    # nothing more.
    assert cut.next_send == pytest.approx(20.375 + 1 / 6)
    assert cut.search.since == cut.next_send
    assert on_refusal(cut, None, 20.375, 20.4, T, **SHARED) == cut


def test_a_bisecting_probe_holds_as_long_as_a_probe_after_the_search():
    # Doubling, a probe is kept after the least hold; once a rate was refused, probes come
    # near the host's rate, where a refusal comes at random: they hold spread_probe_hold.
    doubling = Search(rate=4.0, held=2.0, since=0.0, lower=True, sends=1000)
    assert advanced(doubling, LEAST, DEPTH, LEAST, T).held == 4.0
    bisecting = Search(rate=2.8, held=2.0, ceiling=4.0, since=0.0, lower=True, sends=1000)
    assert advanced(bisecting, T.spread_probe_hold - 0.1, DEPTH, LEAST, T) == bisecting
    assert advanced(bisecting, T.spread_probe_hold, DEPTH, LEAST, T).held == 2.8
