"""Contracts over limiter shapes, sizes, start phases and header lies (issue #10, item 9).

Each example is a crawl, on virtual time, of a real local rate-limited server
(:class:`~requests_retryafter.testing.RateLimitedServer` on 127.0.0.1): a fixed window on the
clock, a sliding window or a token bucket, of 5 to 50 requests per 1 to 60 s, started at any
moment of a window, answering 429 with a truthful, absent, zero, past, constant or random
``Retry-After``. A crawl is ten windows' worth of URLs, each fetched until it succeeds, as a
scheduler would. What must hold on every one:

- never a request within ``min_sleep`` of a refusal (no hot loop, whatever the header says);
- never a sleep beyond ``max_sleep``;
- every URL fetched within a few calls (a call may run out of attempts on first contact);
- in the second half of the crawl, refusals under a quarter of the successes, and, on windows
  of 2 s or more, at least a fifth of the host's rate. That floor guards against the engine
  locking itself out (it once paced a bucket of one request every 6 s at a thirtieth of its
  rate); it is far below the target of issue #10 (0.85), which the benchmarks measure:
  buckets that refill one request every 6 s or more are still paced at about a quarter.

Hypothesis draws the examples from a fixed seed (``derandomize``): the same crawls every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from requests_retryafter import (
    FakeClock,
    HostHeld,
    MemoryStore,
    Policy,
    RetryAfterAdapter,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
)
from requests_retryafter.testing import FixedWindow, RateLimitedServer, SlidingWindow, TokenBucket

EPOCH = 1_700_000_000.0
WINDOWS = 10
CALLS_PER_URL = 4
#: The floor after any refusal (DOMAIN.md: never sleep less than 1 s after a 429).
FLOOR = 1.0


@dataclass(frozen=True)
class Host:
    shape: str
    limit: int
    window: float
    header: str
    phase: float

    def limiter(self) -> Union[FixedWindow, SlidingWindow, TokenBucket]:
        if self.shape == "fixed":
            return FixedWindow(self.limit, self.window)
        if self.shape == "sliding":
            return SlidingWindow(self.limit, self.window)
        return TokenBucket(self.limit / self.window, max(1, self.limit // 4))


@st.composite
def hosts(draw: st.DrawFn) -> Host:
    window = float(draw(st.sampled_from([1, 2, 5, 10, 15, 30, 60])))
    return Host(
        shape=draw(st.sampled_from(["fixed", "sliding", "bucket"])),
        limit=draw(st.integers(min_value=5, max_value=50)),
        window=window,
        header=draw(st.sampled_from(["truthful", "absent", "zero", "constant", "past_date"])),
        phase=draw(st.floats(min_value=0.0, max_value=window, exclude_max=True)),
    )


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(host=hosts(), seed=st.integers(min_value=0, max_value=2**16))
def test_a_crawl_keeps_the_contracts(host: Host, seed: int) -> None:
    policy = Policy()
    start = EPOCH - EPOCH % host.window + host.phase
    clock = FakeClock(start=start)
    urls = host.limit * WINDOWS
    with RateLimitedServer(host.limiter(), host.header, clock=clock, name="portal") as portal:
        adapter = RetryAfterAdapter(clock=clock, store=MemoryStore(), environ={}, seed=seed)
        with requests.Session() as session:
            session.mount("http://", adapter)
            for i in range(urls):
                for _ in range(CALLS_PER_URL):
                    try:
                        response = session.get(f"{portal.url}/records/{i}", timeout=5)
                    except (RetryLimitExceeded, RetryDeadlineExceeded):
                        continue
                    except HostHeld as held:
                        clock.advance(max(0.0, held.until - clock.time()))
                        continue
                    assert response.status_code == 200
                    break
                else:
                    raise AssertionError(f"{host}: URL {i} not fetched in {CALLS_PER_URL} calls")
        hits = portal.stats.hits
        assert portal.stats.requests_after_rejection(within=FLOOR) == 0, host
    assert max(clock.sleeps, default=0.0) <= policy.max_sleep, host
    first, last = hits[0].time, hits[-1].time
    half = first + (last - first) / 2
    late = [h for h in hits if h.time >= half]
    ok = sum(1 for h in late if not h.rejected)
    refused = len(late) - ok
    assert refused <= 0.25 * ok, (host, ok, refused)
    if host.window >= 2 and last > half:
        rate = ok / (last - half) / (host.limit / host.window)
        assert rate >= 0.2, (host, rate)
