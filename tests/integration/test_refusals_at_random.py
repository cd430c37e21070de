"""A fixed window whose host also refuses now and then at random (its load, other clients):
such refusals must not become the window's budget, nor cut it for good.

The portals are :class:`requests_retryafter.testing.RateLimitedServer` (a ThreadingHTTPServer
on 127.0.0.1); the adapter and the portal share one clock that moves a microsecond at each
reading, as a real one does between a request's reservation and its send, so nothing
sleeps and each request meets the host at a moment of its own.
"""

from __future__ import annotations

from collections import Counter
from typing import FrozenSet, Iterable, List, Tuple

import pytest
from _crawling import crawl

from requests_retryafter import MemoryStore, RetryAfterAdapter, TickingClock
from requests_retryafter.testing import FixedWindow, Limiter, RateLimitedServer, ServerStats

MINUTE = 1_700_000_000.0 - 20.0  # the start of a minute of the clock
DAY = 86_400.0


class Blips:
    """``inner``, whose host also refuses every request for ``seconds`` after it let the
    run's ``after``-th request through (for each number in ``after``): a refusal at random,
    over by a retry a second later, at places a test chooses."""

    def __init__(self, inner: Limiter, after: Iterable[int], seconds: float = 1.0) -> None:
        self.inner = inner
        self.after: FrozenSet[int] = frozenset(after)
        self.seconds = seconds
        self._let = 0
        self._until = float("-inf")

    def next_free(self, now: float) -> float:
        moment = self.inner.next_free(now)
        if moment <= now < self._until:
            return self._until
        return moment

    def consume(self, now: float) -> None:
        self.inner.consume(now)
        self._let += 1
        if self._let in self.after:
            self._until = now + self.seconds

    def fresh(self) -> Blips:
        return Blips(self.inner.fresh(), self.after, self.seconds)

    @property
    def rate(self) -> float:
        return self.inner.rate


def run(
    limiter: Blips, start: float, store: MemoryStore, calls: int, port: int = 0, seed: int = 0
) -> Tuple[ServerStats, int]:
    """``calls`` URLs from a fresh portal of ``limiter`` (no ``Retry-After``) from
    ``start``, by a fresh adapter on ``store`` (its random draws from ``seed``): the
    portal's record and its port (the host's key)."""
    clock = TickingClock(start=start)
    with RateLimitedServer(limiter.fresh(), "absent", clock=clock, port=port) as portal:
        adapter = RetryAfterAdapter(clock=clock, store=store, environ={}, seed=seed)
        crawl(portal, adapter, calls)
        return portal.stats, portal.port


def per_window(stats: ServerStats, window: float = 60.0) -> List[int]:
    """The successes in each window of the clock (a minute unless said) the run reached, in
    order."""
    counts = Counter(int(h.time // window) for h in stats.hits if not h.rejected)
    first, last = min(counts), max(counts)
    return [counts.get(m, 0) for m in range(first, last + 1)]


def runs(limiter: Blips, phase: float, calls: int, days: int = 2) -> List[ServerStats]:
    """``days`` runs of ``calls`` URLs, a day apart on one store, each from ``phase``
    seconds into a minute of the clock."""
    store, port, done = MemoryStore(), 0, []
    for day in range(days):
        stats, port = run(limiter, MINUTE + day * DAY + phase, store, calls, port)
        done.append(stats)
    return done


@pytest.mark.parametrize("phase", [15.0, 45.0, 59.15])
def test_refusals_at_random_in_a_runs_first_window_are_not_taken_for_its_budget(phase):
    # 100 per minute of the clock, no header; the host refuses for a second, at random,
    # after the 24th, 65th and 107th request it let through. Unpaced at first, a run took
    # each refusal that was over by the next second for a window of a second, and the
    # minute's end, when it came, for a window of 34 s of the last such cycle's 17
    # requests: it paced the host at 17 requests per 34 s for good (0.34 of the ideal
    # rate, and 0.11 the next run). Now a window misread so is learned again from what
    # the host let through since it last turned, and every whole minute after the run's
    # second goes at the host's budget.
    limiter = Blips(FixedWindow(100, 60.0), after=(24, 65, 107))
    for day, stats in enumerate(runs(limiter, phase, 600)):
        minutes = per_window(stats)
        assert all(n >= 85 for n in minutes[2:-1]), (day, minutes)


def test_a_budget_cut_goes_back_once_the_cut_one_held_a_window():
    # The store knows 100 per minute on the clock; the next run's host refuses for 10 s,
    # at random, after its 30th request, partway through the minute's budget: the budget
    # is cut (to half, at most, at once). The budget before the cut is tried again once the
    # cut one held a window (it was kept for good: probes climb a twentieth a time, every
    # eight windows).
    limiter = Blips(FixedWindow(100, 60.0), after=())
    store = MemoryStore()
    first, port = run(limiter, MINUTE + 30.0, store, 300)
    assert per_window(first)[1:-1] == [100] * len(per_window(first)[1:-1])
    cut = Blips(FixedWindow(100, 60.0), after=(30,), seconds=10.0)
    second, _ = run(cut, MINUTE + DAY + 30.0, store, 600, port)
    minutes = per_window(second)
    assert min(minutes[:2]) < 100, minutes  # the cut
    assert len(minutes) >= 5, minutes
    assert all(n == 100 for n in minutes[2:-1]), minutes


@pytest.mark.parametrize("window", [60.0, 90.0])
def test_a_refusal_at_random_partway_through_a_budget_costs_no_window(window):
    # The store knows 100 per window (a minute of the clock; or 90 s, a length not located
    # on the clock, counted from recoveries); the next run's host refuses for a second, at
    # random, after its 150th and 270th request, partway through two windows' budgets, and
    # lets the retry a second later through. Each such recovery was taken for a window's
    # start: the periods restarted from it while the host's window still counted the
    # requests before it, so the rest of the new period's budget was refused until the
    # window's end, and the budget cut. Now such a refusal is taken for one at random:
    # the periods go on, and every whole window holds the host's budget.
    store = MemoryStore()
    _, port = run(Blips(FixedWindow(100, window), after=()), MINUTE + 30.0, store, 400)
    blips = Blips(FixedWindow(100, window), after=(150, 270))
    second, _ = run(blips, MINUTE + DAY + 30.0, store, 500, port)
    windows = per_window(second, window)
    assert len(windows) >= 5, windows
    assert all(n == 100 for n in windows[1:-1]), windows


WINDOW_45 = 45.0 * 37_777_778  # a start of a 45 s window of the clock (epoch)


@pytest.mark.parametrize("phase", [10.0, 25.0, 40.0])
def test_a_refusal_at_random_in_a_runs_first_window_leaves_the_search_of_its_turn(phase):
    # 50 per 45 s on windows of the clock (a length no server rounds to: no lattice
    # located), no header. The store knows the window; the next run's host refuses for a
    # second, at random, after its 30th request, inside the run's first window, which
    # began before the run. That refusal ended the search of the window's turn: the
    # budget's rest went, and the next request waited a whole window from the run's
    # first (up to a window late). Now it is taken for one at random: the turn is still
    # searched, and found at most a quarter of a window late.
    store = MemoryStore()
    start = WINDOW_45 + phase
    _, port = run(Blips(FixedWindow(50, 45.0), after=()), start, store, 300)
    second, _ = run(Blips(FixedWindow(50, 45.0), after=(30,)), start + DAY, store, 300, port)
    turn = start + DAY + 45.0 - phase
    found = [h for h in second.hits if not h.rejected][50].time
    assert turn <= found <= turn + 45.0 / 4 + 1.0, found - turn


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("phase", [4.56, 16.66])
def test_a_refusal_at_random_in_a_runs_first_burst_locates_no_window_on_the_clock(phase, seed):
    # 100 per minute of the clock, no header. The first run's host refuses for a second,
    # at random, after its 90th request, in the run's first burst; the retry a second
    # later is let through, then ten more, then nothing until the minute turns. The
    # recovery a second in was taken for a window start; once the minute's end showed the
    # window misread (learned again as 100 a minute), that start located the minute on
    # the clock a second after the run's start, 43 to 55 s before the host's turn: the
    # next run waited for that turn and then the next (and the sweep's, refused at random
    # again there, cut its budget to half). Now the recoveries over by the first retry
    # since the host last turned locate nothing: a lattice located is the host's, found
    # a few seconds late at most, and the next run's first window turns with the host's.
    store = MemoryStore()
    blips = Blips(FixedWindow(100, 60.0), after=(90,))
    _, port = run(blips, MINUTE + phase, store, 400, seed=seed)
    second, _ = run(Blips(blips.inner, after=()), MINUTE + DAY + phase, store, 400, port, seed)
    limit = next(state.limit for _, state in store.items())
    assert limit is not None
    assert limit.anchor is None or (limit.anchor - MINUTE) % 60.0 < 5.0, limit
    ideal = 60.0 - phase + 2 * 60.0  # the budget at once, then 100 at each minute's turn
    took = second.hits[-1].time - second.hits[0].time
    assert took <= ideal + 5.0, (took, ideal)


@pytest.mark.parametrize("window", [60.0, 90.0])
def test_a_refusal_at_random_at_a_budgets_last_place_is_retried_in_its_window(window):
    # The store knows 100 per window (a minute of the clock; or 90 s, not located); the
    # next run's host refuses for a second, at random, after its 199th request: its 200th,
    # the last place of a window's budget, is refused. The refused request had taken that
    # place, so its retry a floor later waited a whole window for one, and its recovery
    # then read as a sliding window counter's (the window was paced evenly). Now the retry
    # takes the refused request's place, and every whole window holds the budget.
    store = MemoryStore()
    _, port = run(Blips(FixedWindow(100, window), after=()), MINUTE + 30.0, store, 400)
    blips = Blips(FixedWindow(100, window), after=(199,))
    second, _ = run(blips, MINUTE + DAY + 30.0, store, 500, port)
    windows = per_window(second, window)
    assert len(windows) >= 5, windows
    assert all(n == 100 for n in windows[1:-1]), windows
    refused = [h.time for h in second.hits if h.rejected]
    assert len(refused) <= 2, refused  # the refusal at random, and at most a try's
