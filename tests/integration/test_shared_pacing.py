"""Real time, real processes: four workers share one store and one limited host.

This is the one place the suite runs on the real clock (the workers are separate processes
with their own adapters; a fake clock cannot be shared between them). Windows are short so
that the test takes a few seconds.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Iterator, List, Tuple

import pytest
from _pacing_workers import crawl

from requests_retryafter.testing import FixedWindow, RateLimitedServer

WORKERS = 4
SECONDS = 10.0
LIMIT, WINDOW = 12, 1.0


@pytest.fixture
def portal() -> Iterator[RateLimitedServer]:
    with RateLimitedServer(FixedWindow(LIMIT, WINDOW), "truthful", name="shared") as p:
        yield p


def _run(url: str, store: str) -> List[List[Tuple[float, int]]]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS) as pool:
        results = [pool.apply_async(crawl, (url, store, SECONDS)) for _ in range(WORKERS)]
        return [r.get(timeout=120) for r in results]


def _stores(tmp_path: object) -> List[str]:
    stores = [f"sqlite:///{tmp_path}/hosts.db"]
    if os.environ.get("REQUESTS_RETRYAFTER_TEST_REDIS_URL"):
        url = os.environ["REQUESTS_RETRYAFTER_TEST_REDIS_URL"]
        stores.append(f"{url}?prefix=shared-pacing-{os.getpid()}:")
    return stores


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_workers_sharing_a_store_stay_under_the_limit_together(portal, tmp_path, backend):
    stores = {s.split(":", 1)[0]: s for s in _stores(tmp_path)}
    if backend not in stores:
        pytest.skip("REQUESTS_RETRYAFTER_TEST_REDIS_URL is not set")
    url = portal.url + "/records"
    workers = _run(url, stores[backend])
    calls = [c for worker in workers for c in worker]
    assert calls, "the workers made no calls"
    # Once every worker runs and the limit is learned (two seconds), count what the host saw.
    start = max(worker[0][0] for worker in workers)
    hits = [h for h in portal.stats.hits if h.time >= start + 2.0]
    accepted = sum(1 for h in hits if h.status == 200)
    rejected = sum(1 for h in hits if h.status == 429)
    # Safe first: a share learned by one worker of four may start low and is probed upward.
    # The rate is counted while all four crawl: until the first of them stopped (a worker's
    # last call may wait for a window long after the others stopped, and that tail is no
    # time the four could use: under load, a 16 s span once diluted 49 successes of 10 s).
    stop = min(worker[-1][0] for worker in workers)
    together = sum(1 for h in hits if h.time <= stop and h.status == 200)
    assert together >= 0.3 * LIMIT / WINDOW * (stop - start - 2.0), (together, accepted, rejected)
    # At most the 10 % of successes that #10 allows four processes sharing a store. On a
    # loaded machine a worker's share slips past a window's start now and then: 5 % failed
    # one CI run in three (6 refusals to 85 successes), and the code before it, run beside
    # another such crawl, gave 5 to 75. (Four uncoordinated clients: 40 % in #10.)
    assert rejected <= 0.10 * accepted, (accepted, rejected)
    # Every worker got its share: nobody was starved.
    assert all(any(status == 200 for _, status in worker) for worker in workers)
