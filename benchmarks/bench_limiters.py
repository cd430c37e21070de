#!/usr/bin/env python
"""Crawl a third-party limiter library (``limits``, from PyPI) behind a real WSGI server, in
real time, with RetryAfterAdapter and with urllib3's Retry.

    python benchmarks/bench_limiters.py [--seconds 8] [--json FILE]

Each case is a WSGI app on a threaded ``wsgiref`` server of 127.0.0.1 (its own port and its
own limiter) that counts every request on the wire, and sends headers as limiter libraries
do, on every answer, 200s included, with every stated reset rounded UP to a whole second:

- ``moving 5/s, X-RateLimit``: ``limits``' moving window, 5 per second;
  ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (epoch seconds, rounded up) and, on
  429, ``Retry-After`` (seconds, rounded up);
- ``fixed 5/s, X-RateLimit``: ``limits``' fixed window, 5 per second (its memory storage
  opens a window at the first hit), with the same fields: Flask-Limiter's defaults;
- ``fixed 1 s, draft-6``: ``limits``' fixed window, 5 per second (its memory storage opens a
  window at the first hit); ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` and
  ``RateLimit-Policy: 5;w=1``, ``Retry-After`` on 429;
- ``fixed 5/s, draft-7``: the same limit stated in one combined ``RateLimit: limit=5,
  remaining=0, reset=1`` with ``RateLimit-Policy: 5;w=1``, ``Retry-After`` on 429;
- ``moving 10/10 s, no headers``: a sliding 60/min scaled down to 10 per 10 s (the same
  1 r/s), 429 with no header at all; run ``--slow-seconds`` (default 25) to see windows pass.

Every case runs once per client, all at once (a forked process per client): RetryAfterAdapter
(default policy, memory store, environment ignored) and urllib3's ``Retry(total=5,
backoff_factor=0.5, status_forcelist=[429, 503])``. Reported: successes per second, their
ratio to what the limit allows in that time (``limit * ceil(seconds / window)``, a perfect
client starting on an empty window), and refusals as a share of successes. Nothing is
asserted; exit 0 unless the script cannot run (exit 2 without ``limits``: ``pip install
limits``, or the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import platform
import socketserver
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import requests
import urllib3
from _realtime import bounded_retry  # benchmarks/_realtime.py
from requests.adapters import HTTPAdapter

from requests_retryafter import HostHeld, RetryAfterAdapter, RetryDeadlineExceeded

try:
    import limits
    from limits import parse, storage, strategies
except ImportError:  # pragma: no cover - reported by main()
    limits = None  # type: ignore[assignment]

ADAPTER = "adapter"
BASELINE = "urllib3 Retry"

StartResponse = Callable[[str, List[Tuple[str, str]]], Any]


@dataclass(frozen=True)
class Case:
    """A limiter and the generation of headers its server sends."""

    name: str
    strategy: str  # "moving" or "fixed"
    limit: int
    window: int
    headers: str  # "x-ratelimit", "draft6", "draft7" or "none"
    slow: bool = False

    @property
    def rate(self) -> float:
        return self.limit / self.window


CASES = (
    Case("moving 5/s, X-RateLimit", "moving", 5, 1, "x-ratelimit"),
    Case("fixed 5/s, X-RateLimit", "fixed", 5, 1, "x-ratelimit"),
    Case("fixed 1 s, draft-6", "fixed", 5, 1, "draft6"),
    Case("fixed 5/s, draft-7", "fixed", 5, 1, "draft7"),
    Case("moving 10/10 s, no headers", "moving", 10, 10, "none", slow=True),
)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No per-request lines."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128


class LimitedApp:
    """A WSGI app limited by ``limits``, stating its limit as ``case.headers`` says, counting
    ``(monotonic time, status)`` of every request."""

    def __init__(self, case: Case) -> None:
        assert limits is not None
        self.case = case
        self.item = parse(f"{case.limit} per {case.window} second")
        store = storage.MemoryStorage()
        if case.strategy == "moving":
            self.limiter: Any = strategies.MovingWindowRateLimiter(store)
        else:
            self.limiter = strategies.FixedWindowRateLimiter(store)
        self.lock = threading.Lock()
        self.hits: List[Tuple[float, int]] = []

    def fields(self, allowed: bool) -> List[Tuple[str, str]]:
        reset_at, remaining = self.limiter.get_window_stats(self.item, "client")
        now = time.time()
        delta = max(0, math.ceil(reset_at - now))
        out: List[Tuple[str, str]] = []
        kind, limit = self.case.headers, str(self.case.limit)
        if kind == "x-ratelimit":
            out += [
                ("X-RateLimit-Limit", limit),
                ("X-RateLimit-Remaining", str(remaining)),
                ("X-RateLimit-Reset", str(math.ceil(reset_at))),
            ]
        elif kind == "draft6":
            out += [
                ("RateLimit-Limit", limit),
                ("RateLimit-Remaining", str(remaining)),
                ("RateLimit-Reset", str(delta)),
                ("RateLimit-Policy", f"{limit};w={self.case.window}"),
            ]
        elif kind == "draft7":
            out += [
                ("RateLimit", f"limit={limit}, remaining={remaining}, reset={delta}"),
                ("RateLimit-Policy", f"{limit};w={self.case.window}"),
            ]
        if not allowed and kind != "none":
            out.append(("Retry-After", str(max(1, delta))))
        return out

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        with self.lock:
            allowed = bool(self.limiter.hit(self.item, "client"))
            fields = self.fields(allowed)
            self.hits.append((time.monotonic(), 200 if allowed else 429))
        body = b"ok\n" if allowed else b"Too Many Requests\n"
        status = "200 OK" if allowed else "429 Too Many Requests"
        start_response(
            status,
            [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), *fields],
        )
        return [body]


def client(kind: str, url: str, start: float, seconds: float) -> None:
    """One sequential client from ``start`` (monotonic) for ``seconds``."""
    end = start + seconds
    session = requests.Session()
    if kind == ADAPTER:
        adapter: HTTPAdapter = RetryAfterAdapter(environ={}, seed=0)
    else:
        adapter = HTTPAdapter(max_retries=bounded_retry(end))
    session.mount("http://", adapter)
    time.sleep(max(0.0, start - time.monotonic()))
    while time.monotonic() < end:
        try:
            session.get(url, timeout=5)
        except HostHeld as exc:
            time.sleep(max(0.0, min(exc.until - time.time(), end - time.monotonic())))
        except RetryDeadlineExceeded as exc:
            time.sleep(max(0.0, min(exc.delay, end - time.monotonic())))
        except requests.RequestException:
            pass
    session.close()


@dataclass
class Result:
    case: str
    client: str
    seconds: float
    allowed_rate: float
    ideal: int
    ok: int
    refused: int
    ok_per_s: float
    ratio: float
    refused_share: float


def run(seconds: float, slow_seconds: float) -> List[Result]:
    """Serve every case twice (one per client) and run all clients at once."""
    context = multiprocessing.get_context("fork")
    servers = []
    for case in CASES:
        for kind in (ADAPTER, BASELINE):
            app = LimitedApp(case)
            server = make_server(
                "127.0.0.1", 0, app, server_class=_ThreadingServer, handler_class=_Quiet
            )
            servers.append((case, kind, app, server))
    # Fork the clients before any thread starts here (forking a threaded process can
    # deadlock); they wait for ``start``, the servers listen already and serve from below.
    start = time.monotonic() + 1.0
    procs = []
    for case, kind, _, server in servers:
        length = slow_seconds if case.slow else seconds
        url = f"http://127.0.0.1:{server.server_address[1]}/records"
        proc = context.Process(target=client, args=(kind, url, start, length), daemon=True)
        proc.start()
        procs.append(proc)
    for *_, server in servers:
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    longest = max(slow_seconds, seconds)
    for proc in procs:
        proc.join(timeout=max(0.0, start + longest + 2.0 - time.monotonic()))
    for proc in procs:
        if proc.is_alive():  # asleep in a wait past the end of its run
            proc.terminate()
            proc.join(timeout=5)
    results = []
    for case, kind, app, server in servers:
        server.shutdown()
        server.server_close()
        length = slow_seconds if case.slow else seconds
        with app.lock:
            hits = [(t - start, s) for t, s in app.hits if 0.0 <= t - start < length]
        ok = sum(1 for _, s in hits if s == 200)
        refused = len(hits) - ok
        ideal = case.limit * math.ceil(length / case.window)
        results.append(
            Result(
                case=case.name,
                client=kind,
                seconds=length,
                allowed_rate=case.rate,
                ideal=ideal,
                ok=ok,
                refused=refused,
                ok_per_s=round(ok / length, 2),
                ratio=round(ok / ideal, 3),
                refused_share=round(refused / ok, 4) if ok else float(refused > 0),
            )
        )
    return results


def markdown(results: List[Result]) -> str:
    header = "| limiter | client | s | allowed r/s | ok | 429 | ok/s | ok / allowed | 429 / ok |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        lines.append(
            f"| {r.case} | {r.client} | {r.seconds:g} | {r.allowed_rate:g} | {r.ok} "
            f"| {r.refused} | {r.ok_per_s:.1f} | {r.ratio:.2f} | {r.refused_share:.1%} |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="each 1 s-window case")
    parser.add_argument(
        "--slow-seconds", type=float, default=25.0, help="the 10 s moving window case"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if not (2 <= args.seconds <= 30 and 5 <= args.slow_seconds <= 60):
        parser.error("--seconds must be 2..30 and --slow-seconds 5..60")
    if limits is None:
        print("bench_limiters: the 'limits' package is missing (pip install limits)")
        return 2
    began = time.perf_counter()
    results = run(args.seconds, args.slow_seconds)
    wall = time.perf_counter() - began
    print(markdown(results))
    print(
        "\nok / allowed: successes over limit * ceil(seconds / window), what a perfect client "
        "starting on an empty window gets. Reported, not asserted."
    )
    print(f"\nWall time: {wall:.1f} s; limits {limits.__version__}.")
    if args.json:
        document = {
            "benchmark": "bench_limiters",
            "python": platform.python_version(),
            "requests": requests.__version__,
            "urllib3": urllib3.__version__,
            "limits": limits.__version__,
            "wall_s": round(wall, 3),
            "results": [dataclasses.asdict(r) for r in results],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
