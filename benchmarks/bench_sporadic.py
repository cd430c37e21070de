#!/usr/bin/env python
"""Crawl a host with no rate limit that refuses a share of requests at random, with
RetryAfterAdapter (two runs on one store) and with urllib3's Retry, on virtual time.

    python benchmarks/bench_sporadic.py [--seeds 10] [--urls 1000] [--shares 0.002 0.005 0.01]
                                        [--json FILE]

A portal under load, or one whose limit other clients use up, refuses now and then whatever
the pace: a 429 with no header, over a second later. Each case is
:class:`requests_retryafter.testing.Sporadic` over no limit at all, served over real HTTP on
127.0.0.1 with 50 ms of virtual service time a request (a client alone reaches 20 a second),
one FakeClock shared by the portal and the client. Per seed (another draw of the refusals and
another start moment):

- ``urllib3 Retry``: ``Retry(total=5, backoff_factor=0.5, status_forcelist=[429, 503])``,
  as in ``bench_portals.py``: it retries at once or within a second, and never paces;
- ``adapter run 1``: RetryAfterAdapter with default settings and an empty memory store;
- ``adapter run 2``: a new adapter on the store run 1 left, a day later.

Reported, per share refused: each adapter run's speed as a ratio to urllib3's in the same
process (its virtual seconds for the same successes over the adapter's), as the minimum, the
10th percentile and the median over the seeds. A pace learned from refusals at random that
ratchets down shows here as a low 10th percentile, and lower in run 2. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional, Tuple

# benchmarks/bench_portals.py, found because a script's directory comes first on sys.path.
from bench_portals import PERCENTILE, START, adapter_session, baseline_session, crawl, percentile

from requests_retryafter.clock import FakeClock
from requests_retryafter.stores import MemoryStore
from requests_retryafter.testing import RateLimitedServer, Sporadic

DAY = 86_400.0
#: Virtual seconds a request takes at the portal: a client alone reaches 20 a second.
LATENCY = 0.05


def _seconds(client: str, share: float, seed: int, day: int, urls: int, store: object) -> float:
    """Virtual seconds one crawl of ``urls`` successes took (``client``: ``"baseline"`` or
    ``"adapter"``, on ``store``); infinite if some were given up."""
    start = START + day * DAY + seed * 7.3  # another moment of the minute per seed
    clock = FakeClock(start=start)
    limiter = Sporadic(share, seed=100 * seed + day)
    with RateLimitedServer(limiter, "absent", clock=clock, latency=LATENCY) as portal:
        if client == "baseline":
            session = baseline_session(clock)
        else:
            session = adapter_session(clock, store, seed=10 * seed + day)
        try:
            result = crawl(session, portal.url, urls, clock)
        finally:
            session.close()
    if result.ok < urls:
        return math.inf
    return result.elapsed


def _case(job: Tuple[float, int, int]) -> Tuple[float, int, List[float]]:
    """One share and seed: urllib3's seconds over each adapter run's."""
    share, seed, urls = job
    store = MemoryStore()
    ratios = []
    for day in (0, 1):
        baseline = _seconds("baseline", share, seed, day, urls, None)
        adapter = _seconds("adapter", share, seed, day, urls, store)
        ratios.append(baseline / adapter if adapter > 0 else 0.0)
    return share, seed, ratios


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--urls", type=int, default=1000)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.002, 0.005, 0.01])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    jobs = [(share, seed, args.urls) for share in args.shares for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_case, jobs))
    print(
        f"A host with no limit, {LATENCY * 1000:.0f} ms a request, {args.urls} URLs, "
        f"{args.seeds} seeds: speed as a ratio to urllib3's Retry (min / p10 / median)\n"
    )
    print("| refused at random | adapter run 1 | adapter run 2 |")
    print("|---|---|---|")
    report: Dict[str, Dict[str, List[float]]] = {}
    for share in args.shares:
        runs = [r for s, _, r in results if s == share]
        cells = []
        for day in (0, 1):
            values = [r[day] for r in runs]
            middle = statistics.median(values)
            cells.append(f"{min(values):.2f} / {percentile(values, PERCENTILE):.2f} / {middle:.2f}")
        report[str(share)] = {"run1": [r[0] for r in runs], "run2": [r[1] for r in runs]}
        print(f"| one in {round(1 / share)} | {cells[0]} | {cells[1]} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
