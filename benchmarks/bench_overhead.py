#!/usr/bin/env python
"""Per-request overhead of RetryAfterAdapter against a plain requests HTTPAdapter.

    python benchmarks/bench_overhead.py [--rounds 5] [--requests 2000] [--block 20]
                                        [--json FILE]

Both sessions talk to the same local server (ThreadingHTTPServer, HTTP/1.1 keep-alive, a
tiny 200 answer, no rate limit) in the same process. Within each round the clients take
turns in blocks of ``--block`` requests (which goes first flips each block), so a spell of
load on a shared machine hits them alike. Each request is timed on its own; the report
gives the median per-request time of each client and the ratio adapter / plain (target
< 1.05, reported, not asserted).

The adapter runs with its defaults on the real clock, an in-memory store, the environment
ignored: on a host that never answers 429, what it costs is its bookkeeping.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional

import requests
import urllib3
from requests.adapters import HTTPAdapter

from requests_retryafter import HostState, Observation, RetryAfterAdapter, open_store

BODY = b'{"ok": true}'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


def plain_session() -> requests.Session:
    session = requests.Session()
    session.mount("http://", HTTPAdapter())
    return session


def adapter_session(store: str = "memory://") -> requests.Session:
    session = requests.Session()
    session.mount("http://", RetryAfterAdapter(store=store, environ={}))
    return session


def store_specs(folder: str) -> Dict[str, str]:
    """One spec per backend (Redis when REQUESTS_RETRYAFTER_TEST_REDIS_URL names a server)."""
    specs = {
        "json": f"json://{folder}/hosts.json",
        "sqlite": f"sqlite://{folder}/hosts.db",
        "shelve": f"shelve://{folder}/hosts.shelf",
    }
    redis_url = os.environ.get("REQUESTS_RETRYAFTER_TEST_REDIS_URL")
    if redis_url:
        specs["redis"] = f"{redis_url}?prefix=bench-overhead-{os.getpid()}:"
    return specs


def seed(spec: str, host: str) -> None:
    """Store what a host that was once rate-limited leaves behind, so that the adapter keeps
    it in step with the store (re-reads, heartbeats) as it would in a real job."""
    with open_store(spec) as store:  # type: ignore[attr-defined]
        store.set(
            host,
            HostState(
                host,
                category="truthful",
                observations=(Observation(1_700_000_000.0, 429, 30.0, "delta", recovered=30.0),),
            ),
        )


def timed(session: requests.Session, url: str, count: int) -> List[float]:
    """Seconds taken by each of ``count`` GETs."""
    times: List[float] = []
    clock = time.perf_counter
    for _ in range(count):
        began = clock()
        response = session.get(url, timeout=10)
        elapsed = clock() - began
        if response.status_code != 200:
            raise RuntimeError(f"unexpected status {response.status_code}")
        times.append(elapsed)
    return times


@dataclass
class Row:
    client: str
    requests: int
    median_us: float
    mean_us: float
    p90_us: float
    round_medians_us: List[float]
    ratio: float


def summarise(name: str, times: List[float], medians: List[float], plain: float) -> Row:
    median = statistics.median(times)
    return Row(
        client=name,
        requests=len(times),
        median_us=round(median * 1e6, 1),
        mean_us=round(statistics.fmean(times) * 1e6, 1),
        p90_us=round(statistics.quantiles(times, n=10)[-1] * 1e6, 1),
        round_medians_us=[round(m * 1e6, 1) for m in medians],
        ratio=round(median / plain, 4),
    )


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per client (default 5)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument(
        "--block",
        type=int,
        default=20,
        help="requests a client sends before the next client's turn, within a round",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--stores",
        action="store_true",
        help="also time the adapter on each store backend, against the memory store",
    )
    args = parser.parse_args(argv)

    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/records/1?page=1"
    sessions = {"plain HTTPAdapter": plain_session(), "RetryAfterAdapter": adapter_session()}
    folder = tempfile.mkdtemp(prefix="bench-overhead-")
    if args.stores:
        host = f"127.0.0.1:{server.server_address[1]}"
        seed("memory://", host)
        for name, spec in store_specs(folder).items():
            seed(spec, host)
            sessions[f"RetryAfterAdapter, {name} store"] = adapter_session(spec)
    samples: Dict[str, List[float]] = {name: [] for name in sessions}
    rounds: Dict[str, List[float]] = {name: [] for name in sessions}
    try:
        for session in sessions.values():
            timed(session, url, 200)  # warm up: connections, caches, the adapter's host state
        names = list(sessions)
        blocks = max(1, args.requests // args.block)
        for index in range(args.rounds):
            gc.collect()
            this_round: Dict[str, List[float]] = {name: [] for name in names}
            for block in range(blocks):
                # Blocks of a few requests, the clients in turn (the order flipping each
                # block): a spell of load on a shared machine falls on all of them alike.
                order = names if (index + block) % 2 == 0 else names[::-1]
                for name in order:
                    this_round[name].extend(timed(sessions[name], url, args.block))
            for name, times in this_round.items():
                samples[name].extend(times)
                rounds[name].append(statistics.median(times))
    finally:
        for session in sessions.values():
            session.close()
        server.shutdown()
        server.server_close()
        shutil.rmtree(folder, ignore_errors=True)

    plain = statistics.median(samples["plain HTTPAdapter"])
    rows = [summarise(name, times, rounds[name], plain) for name, times in samples.items()]
    ratio = rows[1].ratio
    memory = statistics.median(samples["RetryAfterAdapter"])
    print("| client | requests | median µs | mean µs | p90 µs | round medians µs | ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        medians = ", ".join(f"{m:.0f}" for m in row.round_medians_us)
        print(
            f"| {row.client} | {row.requests} | {row.median_us:.1f} | {row.mean_us:.1f} "
            f"| {row.p90_us:.1f} | {medians} | {row.ratio:.3f} |"
        )
    # Rounds run in pairs (one of each client, back to back): the median of the per-pair
    # ratios is less sensitive to the machine's load drifting during the run.
    paired = statistics.median(
        a / p for a, p in zip(rounds["RetryAfterAdapter"], rounds["plain HTTPAdapter"])
    )
    verdict = "PASS" if ratio < 1.05 else "FAIL"
    overhead = rows[1].median_us - rows[0].median_us
    print(
        f"\nOverhead: {overhead:+.1f} µs per request; ratio (median, adapter / plain) "
        f"{ratio:.3f}, target < 1.05: {verdict}; median of per-round ratios {paired:.3f}"
    )
    if args.stores:
        print("\nA healthy host through each store, against the memory store (target < 1.05):")
        for name, times in samples.items():
            if name.startswith("RetryAfterAdapter, "):
                store_ratio = statistics.median(times) / memory
                verdict = "PASS" if store_ratio < 1.05 else "FAIL"
                print(f"- {name.split(', ')[1]}: {store_ratio:.3f} {verdict}")
    if args.json:
        document = {
            "benchmark": "bench_overhead",
            "rounds": args.rounds,
            "requests_per_round": args.requests,
            "block": args.block,
            "python": platform.python_version(),
            "requests": requests.__version__,
            "urllib3": urllib3.__version__,
            "ratio": ratio,
            "paired_ratio": round(paired, 4),
            "clients": [dataclasses.asdict(row) for row in rows],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
