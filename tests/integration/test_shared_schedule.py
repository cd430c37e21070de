"""Workers sharing a store take turns on an evenly paced host's sends (issue #10, item 7).

Two adapters (two workers: each has its own id) share one SQLite file and one fake clock, and
call a real local token bucket in turn. Paced on their own, each would send its half of the
budget from its own start, and their sends would come together (a bucket without burst
refuses the second of two sends at once); on the shared schedule they interleave.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator, List, Optional, Union

import pytest
import requests

from requests_retryafter import (
    FakeClock,
    HostState,
    LimitEstimate,
    MemoryStore,
    Policy,
    RetryAfterAdapter,
    Search,
    StateStore,
    StoreError,
    open_store,
)
from requests_retryafter.engine import HostTracker
from requests_retryafter.testing import FixedWindow, RateLimitedServer, SlidingWindow, TokenBucket
from requests_retryafter.tuning import Tuning

RATE = 10.0  # a request every 0.1 s, no burst
START = 1_700_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=START)


@pytest.fixture
def bucket(clock: FakeClock) -> Iterator[RateLimitedServer]:
    with RateLimitedServer(TokenBucket(RATE, 1), "absent", clock=clock, name="bucket") as server:
        yield server


def _seeded(store: str, host: str) -> None:
    """The host as a previous run left it: a bucket of 10 a second, paced evenly."""
    limit = LimitEstimate(rate=RATE, window=1.0, burst=int(RATE), even=True, updated_at=START)
    state = HostState(host, limit=limit, updated_at=START)
    adapter = RetryAfterAdapter(store=store, environ={})
    try:
        adapter.store.set(host, state)
    finally:
        adapter.close()


def _stored(store: str, host: str) -> Optional[HostState]:
    """What ``store`` (a spec) keeps of ``host`` now."""
    opened = open_store(store)
    try:
        return opened.get(host)
    finally:
        opened.close()


def _workers(
    store: Union[str, StateStore], clock: FakeClock, count: int = 2, **options: Any
) -> List[requests.Session]:
    """``count`` sessions, each with its own adapter (its own worker id) on ``store``."""
    sessions = []
    for seed in range(count):
        session = requests.Session()
        adapter = RetryAfterAdapter(
            store=store, clock=clock, environ={}, seed=seed, sync_interval=0.0, **options
        )
        session.mount("http://", adapter)
        sessions.append(session)
    return sessions


def _in_turns(workers: List[requests.Session], url: str, rounds: int = 20) -> None:
    """Each worker calls ``url`` in turn, ``rounds`` times; then all are closed."""
    try:
        for _ in range(rounds):
            for session in workers:
                session.get(url)
    finally:
        for session in workers:
            session.close()


def _evenly_let_through(hits: List[Any]) -> None:
    """Assert that ``hits`` were all let through, no two closer than the bucket's gap."""
    assert all(h.status == 200 for h in hits), [h.status for h in hits]
    gaps = [b.time - a.time for a, b in zip(hits, hits[1:])]
    assert min(gaps) >= 1.0 / RATE - 1e-6, gaps


def test_two_workers_interleave_on_the_shared_schedule(bucket, clock, tmp_path):
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    _seeded(store, host)
    _in_turns(_workers(store, clock), bucket.url + "/records")
    hits = bucket.stats.hits
    assert len(hits) >= 40
    # Once both workers know of each other (their first sends), the bucket refuses nothing
    # and no two sends come closer than the bucket's gap.
    _evenly_let_through(hits[4:])


class _WorkerClock:
    """One worker's view of the shared fake clock: the same time; its sleeps (subclasses)
    may differ from the other workers'."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def time(self) -> float:
        return self.clock.time()

    def monotonic(self) -> float:
        return self.clock.monotonic()

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)


class _Oversleeping(_WorkerClock):
    """A worker's clock whose sleeps overshoot by ``extra`` seconds, as a process's do on a
    busy machine (the one woken late sends late)."""

    def __init__(self, clock: FakeClock, extra: float) -> None:
        super().__init__(clock)
        self.extra = extra

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds + self.extra if seconds > 0 else seconds)


class _Meanwhile(_WorkerClock):
    """A worker's clock that, once ``armed``, runs ``hook`` at its next sleep, once (what
    another worker does while this one sleeps): ``after`` the sleep, or before it.
    ``ran_at``: the time it ran."""

    def __init__(self, clock: FakeClock, hook: Callable[[], None], *, after: bool) -> None:
        super().__init__(clock)
        self.hook, self.after = hook, after
        self.armed = True
        self.ran_at: List[float] = []

    def sleep(self, seconds: float) -> None:
        due = seconds > 0 and self.armed and not self.ran_at
        if due and not self.after:
            self._run()
        self.clock.sleep(seconds)
        if due and self.after:
            self._run()

    def _run(self) -> None:
        self.ran_at.append(self.clock.time())
        self.hook()


def _wait_stored(store: str, host: str, clock: FakeClock, seconds: float) -> Callable[[], None]:
    """What another worker refused by ``host`` does, as a hook for :class:`_Meanwhile`: it
    stores a wait of ``seconds`` for the host from the moment it runs."""

    def refusal_elsewhere() -> None:
        writer = RetryAfterAdapter(store=store, environ={})
        try:
            now = clock.time()
            writer.store.update(
                host,
                lambda s: (s or HostState(host)).replace(
                    blocked_until=now + seconds, blocked_since=now
                ),
            )
        finally:
            writer.close()

    return refusal_elsewhere


def test_a_worker_that_woke_late_does_not_bring_the_next_send_closer(bucket, clock, tmp_path):
    # Two workers take turns; one oversleeps each wait by 50 ms, so each of its sends goes
    # 50 ms after its slot. The other's next slot was taken a gap after that slot, not after
    # the late send: on time, it would follow closer than the bucket's gap (10 a second, no
    # burst: the schedule runs at 7.5 after the workers' first sends came together), and be
    # refused. Each send goes a gap after the last one that went instead.
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    _seeded(store, host)
    late = requests.Session()
    late.mount(
        "http://",
        RetryAfterAdapter(
            store=store, clock=_Oversleeping(clock, 0.05), environ={}, seed=7, sync_interval=0.0
        ),
    )
    _in_turns([late, *_workers(store, clock, 1)], bucket.url + "/records")
    later = bucket.stats.hits[4:]
    assert len(later) >= 36
    _evenly_let_through(later)


def test_a_wait_another_worker_set_meanwhile_delays_a_send_already_taken(bucket, clock, tmp_path):
    # A worker waits for its slot on the schedule; meanwhile another worker is refused and
    # stores a wait for the host. The update just before the send reads it: the send waits
    # too, rather than going into a host that refuses (a fixed window refuses every request
    # until it ends: four workers each sent the one they had taken, 3 or 4 refusals an event).
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    _seeded(store, host)
    refused_for = 2.0
    waiting = _Meanwhile(clock, _wait_stored(store, host, clock, refused_for), after=True)
    late = requests.Session()
    late.mount(
        "http://",
        RetryAfterAdapter(store=store, clock=waiting, environ={}, seed=7, sync_interval=0.0),
    )
    workers = [*_workers(store, clock, 1), late]
    try:
        for round_ in range(6):
            waiting.armed = round_ >= 3  # once both send on the schedule
            for session in workers:
                session.get(bucket.url + "/records")
    finally:
        for session in workers:
            session.close()
    hits = bucket.stats.hits
    assert waiting.ran_at, "the worker never waited for its slot"
    during = [h for h in hits if 0 <= h.time - waiting.ran_at[0] < refused_for]
    assert not during, [h.time - waiting.ran_at[0] for h in during]
    # ... and then it went (no request was lost or refused for it).
    after = [h.status for h in hits if h.time >= waiting.ran_at[0]]
    assert len(after) >= 4, after
    assert set(after) == {200}, after


def test_a_rate_cut_by_a_refusal_counts_from_the_end_of_the_host_s_wait(bucket, clock, tmp_path):
    # The stored search paces two workers at twice the bucket's rate: the bucket refuses
    # one, every worker waits the floor (no header), and the cut rate reaches the host only
    # then. The store says so: the rate's ``since`` (from which it must hold before the next
    # probe) is the wait's end, not the refusal.
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    fast = LimitEstimate(rate=2 * RATE, window=1.0, burst=20, even=True, updated_at=START)
    search = Search(rate=2 * RATE, held=2 * RATE, since=START)
    writer = RetryAfterAdapter(store=store, environ={})
    try:
        writer.store.set(host, HostState(host, limit=fast, search=search, updated_at=START))
    finally:
        writer.close()
    workers = _workers(store, clock)
    try:
        while not any(h.status == 429 for h in bucket.stats.hits):
            for session in workers:
                assert session.get(bucket.url + "/records").status_code == 200
    finally:
        for session in workers:
            session.close()
    refused_at = next(h.time for h in bucket.stats.hits if h.status == 429)
    stored = _stored(store, host)
    assert stored is not None
    assert stored.search is not None
    assert stored.search.held < 2 * RATE
    assert stored.search.since >= refused_at + Policy().min_sleep - 0.01


def _gets_while_another_is_refused(
    store: str, host: str, url: str, clock: FakeClock, calls: int, blocked_for: float
) -> float:
    """``calls`` GETs of ``url`` (each let through) by a worker that reads ``store`` every
    minute at most, unless it waited; at its first sleep, another worker is refused and
    stores a wait of ``blocked_for`` for ``host``. Returns when that happened."""
    waiting = _Meanwhile(clock, _wait_stored(store, host, clock, blocked_for), after=False)
    session = requests.Session()
    session.mount(
        "http://",
        RetryAfterAdapter(store=store, clock=waiting, environ={}, seed=3, sync_interval=60.0),
    )
    try:
        for _ in range(calls):
            assert session.get(url).status_code == 200
    finally:
        session.close()
    assert waiting.ran_at, "the worker never waited"
    return waiting.ran_at[0]


def test_after_a_long_wait_a_worker_reads_what_the_others_wrote_before_it_sends(clock, tmp_path):
    # A worker has sent a window's budget (its statements say none remains) and waits for
    # the stated reset; meanwhile another worker is refused and stores a wait for the host.
    # After a wait of the floor or longer the worker reads the store before it sends, not
    # only every ``sync_interval`` (here a minute): it waits for the other's wait too. Read
    # later, a worker that was never refused burst alone into the others' schedule.
    blocked_for = 30.0
    limiter = SlidingWindow(2, 10.0)
    with RateLimitedServer(
        limiter, "truthful", clock=clock, name="stated", rate_headers="x-ratelimit"
    ) as server:
        store = f"sqlite:///{tmp_path}/hosts.db"
        host = server.url.split("//", 1)[1]
        url = server.url + "/records"
        refused_at = _gets_while_another_is_refused(store, host, url, clock, 3, blocked_for)
        hits = server.stats.hits
    last = hits[-1]
    assert last.time >= refused_at + blocked_for - 1e-6, last.time - refused_at
    assert [h.status for h in hits] == [200, 200, 200]


def test_after_a_short_wait_for_the_hosts_wait_a_worker_reads_the_store_again(
    bucket, clock, tmp_path
):
    # A worker waits out the rest of a wait another worker's refusal set (half a second,
    # shorter than the floor); meanwhile a third worker is refused and stores a longer
    # wait. Woken, the worker reads the store before it sends (not only every
    # ``sync_interval``, here a minute), and waits for that one too. Read only after a wait
    # of the floor or longer, the rest of a wait went unread: workers refused together came
    # back from their first waits all at once, each with the others still unknown.
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    blocked_for = 30.0
    _wait_stored(store, host, clock, 0.5)()
    url = bucket.url + "/records"
    refused_at = _gets_while_another_is_refused(store, host, url, clock, 1, blocked_for)
    [hit] = bucket.stats.hits
    assert hit.time >= refused_at + blocked_for - 1e-6, hit.time - refused_at


class _Ticking(_Meanwhile):
    """:class:`_Meanwhile`, whose every monotonic reading moves the shared clock on by a
    millisecond: the time a real process takes between deciding a wait and looking at it."""

    def monotonic(self) -> float:
        self.clock.advance(0.001)
        return self.clock.monotonic()


def test_after_its_own_refusal_s_wait_a_worker_reads_the_store_again(clock, tmp_path):
    # A worker is refused (``Retry-After: 0``: its own wait is the floor, counted from the
    # refusal, so a few milliseconds short of it by the time the worker looks); meanwhile
    # another worker is refused and stores a longer wait. Woken, the worker reads the store
    # before its retry (not only every ``sync_interval``, here a minute), and waits for that
    # one too, rather than sending into a host that refuses.
    store = f"sqlite:///{tmp_path}/hosts.db"
    blocked_for = 30.0
    with RateLimitedServer(TokenBucket(RATE, 1), "zero", clock=clock, name="zero") as server:
        host = server.url.split("//", 1)[1]
        url = server.url + "/records"
        waiting = _Ticking(clock, _wait_stored(store, host, clock, blocked_for), after=False)
        waiting.armed = False
        session = requests.Session()
        session.mount(
            "http://",
            RetryAfterAdapter(store=store, clock=waiting, environ={}, seed=3, sync_interval=60.0),
        )
        try:
            assert session.get(url).status_code == 200
            waiting.armed = True
            assert session.get(url).status_code == 200  # refused first, at once
        finally:
            session.close()
        hits = server.stats.hits
    assert [h.status for h in hits] == [200, 429, 200]
    assert waiting.ran_at, "the worker never waited"
    assert waiting.ran_at[0] - hits[1].time < Policy().min_sleep  # it waited its own wait
    assert hits[2].time >= waiting.ran_at[0] + blocked_for - 1e-6, hits[2].time - waiting.ran_at[0]


@pytest.mark.parametrize("known", [False, True], ids=["new-to-the-host", "knows-the-host"])
def test_a_worker_made_to_wait_by_another_workers_refusal_is_counted_at_once(
    bucket, clock, tmp_path, known
):
    # Worker A is refused and waits; worker B, which was never refused, calls meanwhile and
    # waits for the host's wait too. B is counted among the host's workers before it
    # sleeps, so that the returns from that wait are spread between both (counted only at
    # its own first refusal, a waiter came back with the others, into a bucket that lets
    # one through). Whether B first learns of the host then (the wait comes with the
    # host's entry) or already had it and reads the wait in a later sync.
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    url = bucket.url + "/records"
    counted: List[int] = []

    def workers_in_store() -> int:
        state = _stored(store, host)
        return 0 if state is None else len(state.workers)

    waiter = _Meanwhile(clock, lambda: counted.append(workers_in_store()), after=False)
    second = requests.Session()
    second.mount(
        "http://",
        RetryAfterAdapter(store=store, clock=waiter, environ={}, seed=9, sync_interval=0.0),
    )
    first = _Meanwhile(clock, lambda: second.get(url), after=False)
    refused = requests.Session()
    refused.mount(
        "http://",
        RetryAfterAdapter(store=store, clock=first, environ={}, seed=8, sync_interval=0.0),
    )
    try:
        if known:
            assert second.get(url).status_code == 200  # (B's first call: no wait)
        refused.get(url)
        refused.get(url)  # the bucket is empty: refused, and B calls while A waits
    finally:
        refused.close()
        second.close()
    assert first.ran_at, "the first worker was not refused"
    assert waiter.ran_at, "the second worker did not wait for the host"
    assert counted == [2]


def test_workers_searching_together_stay_on_the_schedule_whatever_one_learned():
    # The store holds the workers' search; one worker meanwhile learned a window of its own
    # (20 a second, newer than the search's limit): it stays on the schedule, at the
    # search's rate, as the others do (off it, it sent bursts in between their turns).
    search = Search(rate=8.0, held=8.0, since=START)
    own = LimitEstimate(rate=20.0, window=1.0, burst=20, updated_at=START + 5.0)
    tracker = HostTracker(
        HostState("h", limit=own, search=search), Policy(), random.Random(0), "w1"
    )
    tracker.share = 4
    assert tracker.pacer.send_gap() == pytest.approx((1.0 / 8.0, 1.0))


def test_a_send_goes_a_gap_after_the_last_one_that_went():
    state, wait = HostState("h").with_send_spaced(0.1, 100.0)
    assert (wait, state.last_send) == (0.0, 100.0)
    # The one before went 30 ms late: this one waits until a gap after it.
    state, wait = state.replace(last_send=100.03).with_send_spaced(0.1, 100.1)
    assert wait == pytest.approx(0.03)
    assert state.last_send == pytest.approx(100.13)
    # A gap or more after it: at once. A last send far ahead (another machine's clock) is
    # waited for at most a gap.
    assert HostState("h", last_send=100.0).with_send_spaced(0.1, 100.2)[1] == 0.0
    assert HostState("h", last_send=150.0).with_send_spaced(0.1, 100.0)[1] == pytest.approx(0.1)
    # The store keeps it, and two writers' states merge to the later send.
    assert HostState.from_dict(state.to_dict()).last_send == pytest.approx(100.13)
    assert HostState("h", last_send=5.0).merge(HostState("h", last_send=7.0)).last_send == 7.0


def test_one_worker_alone_has_no_shared_schedule(clock):
    limit = LimitEstimate(rate=RATE, window=1.0, burst=10, even=True)
    tracker = HostTracker(HostState("h", limit=limit), Policy(), random.Random(0), "w1")
    assert tracker.pacer.send_gap() is None
    tracker.share = 3
    assert tracker.pacer.send_gap() == pytest.approx((0.1, 1.0))
    # A host paced by windows as long as Tuning.spread_below or longer keeps each worker's
    # share at each window's start: a burst of its own (located on the clock or not).
    long = Tuning().spread_below * 2
    by_window = LimitEstimate(rate=50 / long, window=long, burst=50)
    windows = HostTracker(HostState("h", limit=by_window), Policy(), random.Random(0), "w1")
    windows.share = 3
    assert windows.pacer.send_gap() is None
    on_clock = LimitEstimate(rate=50 / long, window=long, burst=50, anchor=START)
    located = HostTracker(HostState("h", limit=on_clock), Policy(), random.Random(0), "w1")
    located.share = 3
    assert located.pacer.send_gap() is None
    # A shorter window, located or not, is paced on the schedule, spread evenly: from its
    # share of it, no worker can tell it from a token bucket.
    for anchor in (None, START):
        short = LimitEstimate(rate=RATE / 2, window=2.0, burst=10, anchor=anchor)
        brief = HostTracker(HostState("h", limit=short), Policy(), random.Random(0), "w1")
        brief.share = 3
        assert brief.pacer.send_gap() == pytest.approx((0.2, 2.0))
    # But a budget no larger than the number of workers (one request each now and then, at
    # moments that come together at random) is paced on the schedule.
    few = LimitEstimate(rate=1.5, window=2.0, burst=3)
    scarce = HostTracker(HostState("h", limit=few), Policy(), random.Random(0), "w1")
    scarce.share = 3
    assert scarce.pacer.send_gap() == pytest.approx((2.0 / 3, 2.0))
    # A stated rate (no budget learned) is split between the workers instead.
    stated = LimitEstimate(rate=RATE, source="stated")
    split = HostTracker(HostState("h", limit=stated), Policy(), random.Random(0), "w1")
    split.share = 3
    assert split.pacer.send_gap() is None


def test_the_schedule_moves_on_by_the_gap_and_distrusts_a_far_slot():
    state, slot = HostState("h").with_send_taken(0.1, 1.0, 100.0)
    assert (slot, state.next_send) == (100.0, pytest.approx(100.1))
    state, slot = state.with_send_taken(0.1, 1.0, 100.0)
    assert slot == pytest.approx(100.1)
    assert state.next_send == pytest.approx(100.2)
    # A past slot starts now; one further ahead than a window is not believed.
    assert state.with_send_taken(0.1, 1.0, 200.0)[1] == 200.0
    far = state.replace(next_send=150.0)
    assert far.with_send_taken(0.1, 1.0, 100.0)[1] == 100.0
    # What else the store knows is kept.
    kept = HostState("h", category="absent", held_until=5.0)
    assert kept.with_send_taken(0.1, 1.0, 1.0)[0].category == "absent"


def test_fewer_requests_than_workers_stay_within_the_budget():
    limit = LimitEstimate(rate=1.0, window=1.0, burst=1, even=True)
    tracker = HostTracker(HostState("h", limit=limit), Policy(), random.Random(0))
    tracker.share = 4
    allowed, period = tracker.pacer.budget() or (0, 0.0)
    # Four workers, one request a window between them: each sends one every four windows.
    assert allowed * 4 / period <= 1.0
    limit = LimitEstimate(rate=3.0, window=1.0, burst=3)
    tracker = HostTracker(HostState("h", limit=limit), Policy(), random.Random(0))
    tracker.share = 4
    allowed, period = tracker.pacer.budget() or (0, 0.0)
    assert allowed * 4 / period <= 3.0


def test_workers_from_a_cold_start_search_the_bucket_together(bucket, clock, tmp_path):
    """No stored limit: three workers learn a share, then search the host's rate together
    (one search in the store), and end near the bucket's rate without piling refusals on."""
    workers = _workers(f"sqlite:///{tmp_path}/hosts.db", clock, 3, deadline=120.0)
    _crawl_for_a_minute(workers, bucket.url + "/records", clock)
    _near_the_rate(bucket.stats.hits, since=START + 40.0)


def test_workers_from_a_cold_start_find_a_bucket_with_a_burst_that_says_wait_a_second(
    clock, tmp_path
):
    """A bucket with a burst that answers ``Retry-After: 1`` (nginx's ``limit_req`` with
    ``burst=5``) looks to each worker like a window of about a second, of which it sees only
    its share: four workers still end near the bucket's rate together."""
    limiter = TokenBucket(RATE, 6)
    with RateLimitedServer(limiter, "truthful", clock=clock, name="burst") as server:
        workers = _workers(f"sqlite:///{tmp_path}/hosts.db", clock, 4, deadline=120.0)
        _crawl_for_a_minute(workers, server.url + "/records", clock)
        hits = server.stats.hits
    assert {h.retry_after for h in hits if h.status == 429} == {"1"}
    _near_the_rate(hits, since=START + 30.0)


@pytest.mark.parametrize(
    "limiter",
    [lambda: SlidingWindow(20, 1.0), lambda: FixedWindow(40, 2.0)],
    ids=["moving-20-a-second", "fixed-40-per-2s"],
)
def test_workers_on_a_host_that_states_its_limit_get_what_one_client_alone_gets(limiter, tmp_path):
    """A window that states its limit, what remains and its reset (whole seconds, rounded
    up), as limiter libraries do: four workers sharing a store get, from their first
    seconds on, what one client alone gets, less ``utilization``'s margin at most (they
    pace the stated rate at 0.95 of it together), with few refusals (issue #10, item 7)."""
    alone = _stated_crawl(limiter(), 1, f"sqlite:///{tmp_path}/alone.db")
    four = _stated_crawl(limiter(), 4, f"sqlite:///{tmp_path}/four.db")

    def accepted(hits: List[Any]) -> int:
        return sum(1 for h in hits if h.status == 200 and START + 2.0 <= h.time < START + 12.0)

    assert accepted(four) >= 0.93 * accepted(alone), (accepted(four), accepted(alone))
    _near_the_rate(four, since=START + 10.0, rate=20.0)


def _stated_crawl(limiter: Any, count: int, store: str) -> List[Any]:
    """The hits of ``count`` workers on ``store`` crawling a host limited by ``limiter``
    (stating ``X-RateLimit-*``) for a minute of a clock of their own."""
    clock = FakeClock(start=START)
    with RateLimitedServer(
        limiter, "truthful", clock=clock, name="stated", rate_headers="x-ratelimit"
    ) as server:
        workers = _workers(store, clock, count, deadline=120.0)
        _crawl_for_a_minute(workers, server.url + "/records", clock)
        return list(server.stats.hits)


def _crawl_for_a_minute(workers: List[requests.Session], url: str, clock: FakeClock) -> None:
    """Each worker calls ``url`` in turn until a minute after ``START``; then all are
    closed."""
    try:
        while clock.time() < START + 60.0:
            for session in workers:
                session.get(url)
    finally:
        for session in workers:
            session.close()


def _near_the_rate(hits: List[Any], since: float, rate: float = RATE) -> None:
    """Assert that from ``since`` the host let through at least 0.8 of its ``rate``, with
    refusals at most a tenth of the successes."""
    late = [h for h in hits if h.time >= since]
    accepted = sum(1 for h in late if h.status == 200)
    refusals = sum(1 for h in late if h.status == 429)
    span = late[-1].time - late[0].time
    assert accepted >= 0.8 * rate * span, (accepted, span)
    assert refusals <= 0.1 * accepted, (refusals, accepted)


class _SharedFlakyStore(MemoryStore):
    """A memory store that says it is shared (as SQLite and Redis are) and fails while
    ``down``."""

    shared = True

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreError("redis://cache:6379: connection refused")

    def get(self, host: str) -> Optional[HostState]:
        self._check()
        return super().get(host)

    def update(self, host: str, fn: Any) -> HostState:
        self._check()
        return super().update(host, fn)

    def set(self, host: str, state: HostState) -> None:
        self._check()
        super().set(host, state)


def test_without_the_store_each_worker_keeps_to_its_share_of_the_schedule(clock):
    # A bucket deep enough to absorb two workers' sends coming together: what it refuses is
    # rate, not coincidence.
    deep = TokenBucket(RATE, 5)
    with RateLimitedServer(deep, "absent", clock=clock, name="deep") as server:
        host = server.url.split("//", 1)[1]
        store = _SharedFlakyStore()
        limit = LimitEstimate(rate=RATE, window=1.0, burst=int(RATE), even=True, updated_at=START)
        store.set(host, HostState(host, limit=limit, updated_at=START))
        workers = _workers(store, clock)
        try:
            for _ in range(5):
                for session in workers:
                    assert session.get(server.url + "/records").status_code == 200
            store.down = True
            down_at = clock.time()
            for _ in range(40):
                for session in workers:
                    assert session.get(server.url + "/records").status_code == 200
        finally:
            for session in workers:
                session.close()
        late = [h for h in server.stats.hits if h.time >= down_at]
    # Each worker paces on its own copy at half the rate: together, no faster than the host.
    assert sum(h.status == 429 for h in late) <= 2, [h.status for h in late]


def _crawl_alone(store: str, clock: FakeClock, url: str, calls: int, seed: int) -> None:
    """One run: ``calls`` GETs through an adapter of its own on ``store``, closed at the end
    (as ``with requests.Session()`` closes it)."""
    adapter = RetryAfterAdapter(store=store, clock=clock, environ={}, seed=seed)
    with requests.Session() as session:
        session.mount("http://", adapter)
        for i in range(calls):
            session.get(f"{url}/records/{i}")


def test_a_run_that_follows_a_closed_one_on_the_same_store_paces_the_host_alone(
    bucket, clock, tmp_path
):
    # Runs back to back on one store (a shell loop, a scheduler): the first run's heartbeat
    # is seconds old when the next starts. Counted as a worker still, it made the next run
    # take half the rate on the shared schedule and search its way back: 7.1-8.4 a second
    # with 3-6 refusals, where the same run a minute later gets 9.7 with one.
    store = f"sqlite:///{tmp_path}/hosts.db"
    _crawl_alone(store, clock, bucket.url, 200, seed=0)
    host = bucket.url.split("//", 1)[1]
    first = _stored(store, host)
    assert first is not None
    assert first.workers  # it was counted as the host's worker...
    assert first.active_worker_ids(clock.time()) == ()  # ...and it left when closed
    clock.advance(1.0)
    before = len(bucket.stats.hits)
    _crawl_alone(store, clock, bucket.url, 200, seed=1)
    hits = bucket.stats.hits[before:]
    accepted = [h for h in hits if h.status == 200]
    assert len(accepted) == 200
    assert len(hits) - len(accepted) <= 2  # a probe now and then
    took = accepted[-1].time - accepted[0].time
    assert (len(accepted) - 1) / took >= 0.9 * RATE, took


_EXITS_WITHOUT_CLOSING = """
import sys
import requests
from requests_retryafter import FakeClock, RetryAfterAdapter
from requests_retryafter.testing import RateLimitedServer, TokenBucket

clock = FakeClock(start=1_700_000_000.0)
with RateLimitedServer(TokenBucket(10.0, 1), "absent", clock=clock) as portal:
    session = requests.Session()
    session.mount("http://", RetryAfterAdapter(store=sys.argv[1], clock=clock, environ={}))
    for i in range(40):
        session.get(f"{portal.url}/records/{i}")
    print(portal.url.split("//", 1)[1], clock.time())
"""


def test_a_process_that_exits_without_closing_its_adapter_leaves_the_host(tmp_path):
    # An old script never closes its session: at exit, its adapter still flushes what it
    # learned, and records that it no longer paces the host.
    import subprocess
    import sys

    store = f"sqlite:///{tmp_path}/hosts.db"
    done = subprocess.run(
        [sys.executable, "-c", _EXITS_WITHOUT_CLOSING, store],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    host, end = done.stdout.split()
    state = _stored(store, host)
    assert state is not None
    assert state.limit is not None
    assert state.workers
    assert state.active_worker_ids(float(end)) == ()


def test_a_run_too_short_for_a_heartbeat_still_leaves_when_closed(clock, tmp_path):
    # Five GETs to a host that states its limit, over before the first heartbeat was due:
    # the flush on closing counted the worker in, after its departure was to be recorded.
    store = f"sqlite:///{tmp_path}/hosts.db"
    with RateLimitedServer(
        FixedWindow(20, 10), "truthful", clock=clock, rate_headers="draft7"
    ) as portal:
        _crawl_alone(store, clock, portal.url, 5, seed=0)
        host = portal.url.split("//", 1)[1]
    state = _stored(store, host)
    assert state is not None
    assert state.workers  # counted...
    assert state.active_worker_ids(clock.time()) == ()  # ...and gone


def test_a_worker_used_after_close_is_counted_at_the_host_again(bucket, clock, tmp_path):
    store = f"sqlite:///{tmp_path}/hosts.db"
    adapter = RetryAfterAdapter(store=store, clock=clock, environ={}, seed=0)
    session = requests.Session()
    session.mount("http://", adapter)
    host = bucket.url.split("//", 1)[1]
    for i in range(40):
        session.get(f"{bucket.url}/records/{i}")
    session.close()
    left = _stored(store, host)
    assert left is not None
    assert left.active_worker_ids(clock.time()) == ()
    for i in range(40):
        session.get(f"{bucket.url}/records/{i}")
    adapter.flush()
    back = _stored(store, host)
    assert back is not None
    assert back.active_worker_ids(clock.time()) != ()
    session.close()


@pytest.mark.parametrize("searched", [False, True], ids=["limit", "limit-and-search"])
def test_a_worker_alone_counts_the_workers_that_started_since_before_it_sends_again(
    bucket, clock, tmp_path, searched
):
    # The workers of one job start together, on a host a previous run learned. The first
    # found no other worker at its first read of the store and paced the host alone; the
    # others, counting it, took turns on the shared schedule. Until the first one's next
    # sync (``sync_interval``, 2 s by default) the host got both paces, twice its rate:
    # real workers of a second run on a limiter of 20 a second lost a second of it to the
    # refusal. A worker alone reads the store before each paced send, so the others are
    # counted at its next one. And where a previous run of workers left their schedule's
    # search in the store, the next worker took the idle schedule's first slot at once,
    # right behind the first one's send, which the bucket (no burst) refused: a schedule
    # left idle starts a gap from now when a worker counted since its last send may be
    # sending off it.
    store = f"sqlite:///{tmp_path}/hosts.db"
    host = bucket.url.split("//", 1)[1]
    _seeded(store, host)
    if searched:
        opened = open_store(store)
        try:
            state = opened.get(host)
            assert state is not None
            opened.set(host, state.replace(search=Search(rate=RATE, held=RATE, since=START)))
        finally:
            opened.close()
    workers = []
    for seed in range(2):
        session = requests.Session()
        session.mount("http://", RetryAfterAdapter(store=store, clock=clock, environ={}, seed=seed))
        workers.append(session)
    try:
        workers[0].get(bucket.url + "/records/first")  # alone, before the other starts
        for i in range(15):
            for session in workers:
                session.get(f"{bucket.url}/records/{i}")
    finally:
        for session in workers:
            session.close()
    hits = bucket.stats.hits
    assert len([h for h in hits if h.status == 200]) == 31
    # Counted alone until its next sync, the first worker was refused at the second
    # worker's first send and every worker waited the floor: 31 requests took 4 s, not 3.
    _evenly_let_through(hits)
    took = hits[-1].time - hits[0].time
    assert took <= 31 / (0.9 * RATE), took
