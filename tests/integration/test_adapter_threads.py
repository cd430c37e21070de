"""One adapter shared by many threads: everything succeeds, the per-host concurrency cap holds,
and no thread sends to a host before the host's wait is over.

Time is a shared FakeClock: a sleep moves it at once, so arrival times at the server are
virtual; "no arrival earlier than the rejection time plus the wait decided" is the property.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Tuple

import pytest
import requests
from _quota import stated_reset
from requests.adapters import HTTPAdapter

from requests_retryafter import (
    Decision,
    Event,
    FakeClock,
    HostHeld,
    HostState,
    MemoryStore,
    Observation,
    RetryAfterAdapter,
    open_store,
)
from requests_retryafter.engine import HostTracker
from requests_retryafter.testing import (
    FixedWindow,
    Limiter,
    RateLimitedServer,
    ServerStats,
    SlidingWindow,
    TokenBucket,
    Unstated,
)

THREADS = 8
PER_THREAD = 20


def hold_until_crowded(server, crowd: int, timeout: float = 0.005):
    """Keep each request in flight until ``crowd`` are, or ``timeout`` real seconds pass, so
    that a broken cap would show as a crowd at the server."""
    cond = threading.Condition()

    def during(seen):
        with cond:
            cond.notify_all()
            cond.wait_for(lambda: server.in_flight >= crowd, timeout=timeout)

    server.during = during


def hammer(session, url: str, threads: int = THREADS, per_thread: int = PER_THREAD) -> List:
    def worker(n: int):
        return [session.get(f"{url}/{n}/{i}", timeout=10).status_code for i in range(per_thread)]

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(worker, n) for n in range(threads)]
        return [code for f in futures for code in f.result()]


def test_many_threads_all_succeed_within_the_concurrency_cap(server, make_session):
    hold_until_crowded(server, crowd=3)
    session, _ = make_session(max_concurrency=2)
    codes = hammer(session, server.url)
    assert codes == [200] * THREADS * PER_THREAD
    assert server.count == THREADS * PER_THREAD
    assert server.max_in_flight == 2


def test_the_crowd_measure_works_without_a_tight_cap(server, make_session):
    # The same load with a cap of 8 does crowd the server: the measure above can fail.
    hold_until_crowded(server, crowd=3, timeout=0.05)
    session, _ = make_session(max_concurrency=8)
    codes = hammer(session, server.url, per_thread=3)
    assert codes == [200] * THREADS * 3
    assert server.max_in_flight >= 3


def test_many_threads_against_a_rate_limited_host(server, make_session, clock, window_host):
    # 40 requests per 10 s window; the 160 requests of 8 threads hit the limit now and then.
    box = window_host(
        allow=40, window=10.0, header=lambda remaining, episode: str(math.ceil(remaining))
    )
    decided: List[Decision] = []
    session, _ = make_session(max_concurrency=2, max_attempts=10, on_decision=decided.append)
    codes = hammer(session, server.url)
    assert codes == [200] * THREADS * PER_THREAD
    assert box.episodes >= 1
    # Every wait decided after a refusal is floored and capped. (A thread may then sleep only
    # the rest of a wait another thread's refusal began: such sleeps can be shorter.)
    after_refusals = [d.wait for d in decided if d.event == "sleep"]
    assert after_refusals
    assert all(1.0 <= w <= 300.0 for w in after_refusals)
    assert all(s <= 300.0 for s in clock.sleeps)


def test_many_threads_against_a_host_that_429s_at_random(server, make_session, clock):
    # Refusals that have nothing to do with this client's pace (another client's load).
    # Pacing is off: each thread's paced waits would add up on the one virtual clock.
    lock = threading.Lock()
    counter = {"n": 0}

    def sometimes(seen):
        with lock:
            counter["n"] += 1
            if counter["n"] % 7 == 0:
                return 429, {"Retry-After": "1"}
        return 200, {}

    server.respond(sometimes)
    session, _ = make_session(max_concurrency=2, max_attempts=10, pace=False)
    codes = hammer(session, server.url)
    assert codes == [200] * THREADS * PER_THREAD
    refused = server.count - THREADS * PER_THREAD
    assert refused >= THREADS * PER_THREAD // 7
    # Every refusal waited: a call's own sleep, or another's in flight with it (two at most
    # here) that moved the one virtual clock past the host's wait before its turn came
    # (counted one sleep a refusal, 25 sleeps for 26 refusals failed on a loaded machine).
    assert 2 * len(clock.sleeps) >= refused
    assert all(s >= 1.0 for s in clock.sleeps)


def test_sporadic_refusals_do_not_ratchet_the_pace_down(server, make_session, clock):
    # One request in seven is refused for a second, whatever the pace (load from others).
    # Two thousand calls must all succeed, in well under an hour of virtual time.
    counter = {"n": 0}

    def sometimes(seen):
        counter["n"] += 1
        if counter["n"] % 7 == 0:
            return 429, {"Retry-After": "1"}
        return 200, {}

    server.respond(sometimes)
    session, _ = make_session(max_attempts=10)
    t0 = clock.time()
    for i in range(2000):
        assert session.get(f"{server.url}/{i}").status_code == 200
    assert clock.time() - t0 < 3600.0


def test_threads_wait_out_the_hosts_wait(server, make_session, clock):
    t0 = clock.time()
    server.replies((429, {"Retry-After": "30"}))
    session, _ = make_session(pace=False)
    # A keyless POST is refused and returned: the host's wait is now 30 s.
    assert session.post(server.url + "/", data=b"x").status_code == 429
    codes = hammer(session, server.url, per_thread=2)
    assert codes == [200] * THREADS * 2
    times = server.times
    assert times[0] == t0
    assert min(times[1:]) >= t0 + 30.0


def test_threads_queued_on_the_cap_do_not_send_before_the_wait(server, clock, make_session):
    # One request in flight at a time (max_concurrency=1). The first gets a 429 with
    # Retry-After: 30 while the other threads wait for the slot. Whoever gets the slot next
    # must wait the 30 s before sending. (It holds the host's turnstile while it waits for
    # the slot: no other thread's sleep can move the clock before it sends, so a request
    # sent too soon reaches the server before the 30 s.)
    t0 = clock.time()
    second_arrived = threading.Event()
    first_in_flight = threading.Event()

    def during(seen):
        if seen.index == 0:
            first_in_flight.set()
            # Let the other threads reach the concurrency cap behind this request.
            threading.Event().wait(0.2)
        else:
            second_arrived.set()

    class SlowToStore(MemoryStore):
        """Takes its time to store the first rejection, unless a second request has already
        reached the server (which would be the bug this test looks for)."""

        def update(self, host, fn):
            new = fn(self.get(host))
            if new.blocked_until > 0:
                second_arrived.wait(0.5)
            self.set(host, new)
            return new

    server.during = during
    server.replies((429, {"Retry-After": "30"}))
    session, _ = make_session(store=SlowToStore(), max_concurrency=1, pace=False)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(session.get, server.url + "/0", timeout=10)
        assert first_in_flight.wait(5)
        rest = [pool.submit(session.get, f"{server.url}/{n}", timeout=10) for n in (1, 2, 3)]
        codes = [f.result().status_code for f in [first, *rest]]
    assert codes == [200] * 4
    times = server.times
    assert len(times) == 5
    assert times[0] == t0
    assert min(times[1:]) >= t0 + 30.0, times


def test_a_thread_given_the_slot_after_a_rejection_waits_before_sending(
    server, clock, make_session, monkeypatch, slot_blocked
):
    # One request in flight at a time (max_concurrency=1). A second thread, which saw no
    # wait on the host, is waiting for the slot while the first thread's request is refused
    # with Retry-After: 30. Given the slot, it must look at the host's wait again and sleep,
    # not send.
    # (It holds the host's turnstile meanwhile: the first thread, back for its retry,
    # comes after it, and the wait is over by then.)
    t0 = clock.time()
    first_in_flight = threading.Event()

    def during(seen):
        if seen.index == 0:
            first_in_flight.set()
            # Answered once the second thread waits for the slot (5 s at most).
            slot_blocked.wait(5)

    server.during = during
    server.replies((429, {"Retry-After": "30"}))
    session, _ = make_session(max_concurrency=1, pace=False)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(session.get, server.url + "/0", timeout=10)
        assert first_in_flight.wait(5)
        second = pool.submit(session.get, server.url + "/1", timeout=10)
        codes = [first.result().status_code, second.result().status_code]
    assert codes == [200, 200]
    assert clock.sleeps == [30.0]  # the second thread slept; the first found the wait over
    times = server.times
    assert len(times) == 3
    assert times[0] == t0
    assert min(times[1:]) >= t0 + 30.0, times


def test_held_host_refuses_every_thread_without_touching_the_wire(server, make_session, clock):
    reset = (clock.time() // 3600 + 1) * 3600
    server.replies(
        (429, {"Retry-After": str(int(reset - clock.time())), **stated_reset(reset - clock.time())})
    )
    session, _ = make_session()
    with pytest.raises(HostHeld):
        session.get(server.url + "/")

    def worker(n):
        try:
            session.get(f"{server.url}/{n}")
        except HostHeld as exc:
            return exc.until
        return None

    with ThreadPoolExecutor(THREADS) as pool:
        untils = list(pool.map(worker, range(THREADS * 4)))
    assert untils == [reset] * THREADS * 4
    assert server.count == 1
    assert clock.sleeps == []


def test_a_decision_hook_runs_outside_the_hosts_lock(server, make_session, clock, tmp_path):
    # Another worker stored three recoveries of the host: this worker's next read of the store
    # judges the host from them, under the host's lock. The hook that hears of it sends to the
    # host from another thread and waits for that request: announced under the lock, the
    # other thread would wait for the lock, and the hook for the other thread.
    store = f"sqlite:///{tmp_path}/hosts.db"
    done: List[bool] = []

    def hook(decision: Decision) -> None:
        if decision.event == Event.CATEGORY:
            other = threading.Thread(
                target=lambda: done.append(session.get(server.url + "/b").status_code == 200)
            )
            other.start()
            other.join(timeout=10)
            done.append(not other.is_alive())

    session, _ = make_session(store=store, on_decision=hook)
    assert session.get(server.url + "/a").status_code == 200
    wall = clock.time()
    recoveries = tuple(
        Observation(wall - 600 + 60 * i, 429, 30.0, "delta", recovered=30.0) for i in range(3)
    )
    with open_store(store) as other_worker:
        other_worker.set(server.host, HostState(server.host, observations=recoveries))
    clock.advance(5)  # past sync_interval: the next call reads the store
    response = session.get(server.url + "/a")
    assert response.status_code == 200
    assert done == [True, True]  # the hook's request went, and the hook did not wait it out
    assert [d.event for d in response.retry_after.decisions] == [Event.CATEGORY]


class QuietClock(FakeClock):
    """A FakeClock whose sleeps move time only once no request is on the wire (5 s at
    most): a request another thread sent reaches the server at the virtual time it went,
    not after a sleep that came while it was on its way. A request is on the wire from
    its number (:meth:`numbered` wraps ``HostTracker.number``, taken before the host's
    turnstile is let go) until its transport returns (:meth:`answered` wraps it)."""

    def __init__(self, start: float) -> None:
        super().__init__(start=start)
        self._wire = threading.Condition()
        self._on_wire = 0

    def numbered(self, number):
        def counted(*args, **kwargs):
            with self._wire:
                self._on_wire += 1
            return number(*args, **kwargs)

        return counted

    def answered(self, send):
        def counted(*args, **kwargs):
            try:
                return send(*args, **kwargs)
            finally:
                with self._wire:
                    self._on_wire -= 1
                    self._wire.notify_all()

        return counted

    def sleep(self, seconds: float) -> None:
        with self._wire:
            self._wire.wait_for(lambda: self._on_wire == 0, timeout=5)
        super().sleep(seconds)


def threaded_crawl(
    monkeypatch, limiter: Limiter, behaviour: str, records: int, alone: int = 0, **server: Any
) -> Tuple[List[int], ServerStats]:
    """``records`` GETs by eight threads on one session (after ``alone`` sent one at a
    time, each answered 200) against ``limiter`` on a server (``behaviour``, ``server``: its
    options), on a :class:`QuietClock`: the statuses the threads got, and the server's
    counts."""
    clock = QuietClock(start=1_700_000_000.0)
    monkeypatch.setattr(HostTracker, "number", clock.numbered(HostTracker.number))
    monkeypatch.setattr(HTTPAdapter, "send", clock.answered(HTTPAdapter.send))
    with RateLimitedServer(limiter, behaviour, clock=clock, **server) as portal:
        adapter = RetryAfterAdapter(clock=clock, store=MemoryStore(), environ={}, seed=0)
        with requests.Session() as session:
            session.mount("http://", adapter)

            def get(i: int) -> int:
                return session.get(f"{portal.url}/records/{i}", timeout=10).status_code

            for i in range(alone):
                assert get(i) == 200
            with ThreadPoolExecutor(THREADS) as pool:
                codes = list(pool.map(get, range(alone, alone + records)))
    return codes, portal.stats


def test_threads_sharing_an_adapter_pace_a_bucket_as_one_client_does(monkeypatch):
    # Eight threads on one session crawl a token bucket of 10 a second with no burst and no
    # header (nginx's limit_req): together they find its rate within 30 s, as one client
    # does, and few of their requests are refused. (Each thread reserved its place a gap
    # after the others', at the pace first learned, and counted the others' refusals as
    # its own failed retries: on nginx, eight threads got 1.4 a second.)
    calls = 600
    codes, stats = threaded_crawl(monkeypatch, TokenBucket(10.0, 1), "absent", calls, name="nginx")
    hits = stats.hits
    assert codes == [200] * calls
    t0 = hits[0].time
    late = [h for h in hits if h.time >= t0 + 30.0]
    took = late[-1].time - t0 - 30.0
    assert sum(1 for h in late if not h.rejected) >= 0.8 * 10.0 * took
    assert stats.rejected <= 0.05 * calls


@pytest.mark.parametrize("style", ["x-ratelimit", "draft6"])
def test_threads_never_send_past_the_last_place_the_host_states(monkeypatch, style):
    # A moving window of 5 per 10 s that states what remains on every answer. One request
    # first (its answer: 4 remain), then eight threads fetch 16 records: they send no more
    # than what remains, the last place answered before the next goes, and wait for a
    # place to free; none is refused. (They all went at once, and the host refused 3 or 4
    # of them.)
    codes, stats = threaded_crawl(
        monkeypatch,
        SlidingWindow(5, 10),
        "truthful",
        16,
        alone=1,
        rate_headers=style,
        latency=0.002,
    )
    assert codes == [200] * 16
    assert stats.rejected == 0
    hits = stats.hits
    assert len(hits) == 17
    assert max(sum(1 for h in hits if t.time <= h.time < t.time + 10) for t in hits) == 5


def test_threads_learn_a_limit_the_host_does_not_state(monkeypatch):
    # The host states an hour's quota of 5000 on every answer, thousands remaining, and
    # refuses by a moving window of 5 per 10 s that no field mentions (as GitHub's
    # secondary limits). Eight threads fetch 40 records: the refusals of their first burst
    # teach the limit, and they pace below it. (Taken for threads outrunning the
    # statements, those refusals taught nothing, and eight threads went together after
    # every recovery: 3 refused in each window.)
    limiter = Unstated(FixedWindow(5000, 3600), SlidingWindow(5, 10))
    codes, stats = threaded_crawl(
        monkeypatch, limiter, "truthful", 40, rate_headers="x-ratelimit", latency=0.002
    )
    assert codes == [200] * 40
    assert stats.rejected <= THREADS
