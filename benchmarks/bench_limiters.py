#!/usr/bin/env python
"""Crawl a third-party limiter library (``limits``, from PyPI) behind a real WSGI server, in
real time, with RetryAfterAdapter and with urllib3's Retry.

    python benchmarks/bench_limiters.py [--seconds 8] [--seeds 4] [--json FILE]
                                        [--no-workers | --workers-only] [--second-run]

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
- ``sliding counter 10/s, X-RateLimit``: ``limits``' sliding window counter (Flask-Limiter's
  ``sliding-window-counter`` strategy), 10 per second: counts per window of the clock, the
  last window's count weighed by the share of this one still to come, so that a window's
  budget sent at its start keeps most of the next one shut; ``X-RateLimit-*`` as above (its
  epoch reset, a window's end plus float noise rounded up, often lands a second late);
- ``moving 10/10 s, no headers``: a sliding 60/min scaled down to 10 per 10 s (the same
  1 r/s), 429 with no header at all; run ``--slow-seconds`` (default 25) to see windows pass;
- ``sliding counter 30/10 s, no headers``: ``limits``' sliding window counter of 30 per 10 s,
  a bare 429, run ``--slow-seconds`` too;
- ``django-ratelimit 30/8 s, no headers``: ``django-ratelimit``'s decorator on a Django view
  (its windows fixed, of the clock's whole seconds, offset by a hash of the rate-limit key:
  a phase of the host's own that no client can know), a bare 429, run ``--slow-seconds``;
  skipped without it (``pip install django django-ratelimit``);
- ``moving 5/s, X-RateLimit, 8 threads`` and ``fixed 5/s, draft-7, 8 threads``: the cases
  above crawled by eight threads sharing one session (and so one adapter), as a job's
  thread pool fetches: what they get together (urllib3's eight threads alike);
- ``moving 5/s unstated, hourly X-RateLimit, 8 threads``: eight threads on ``limits``' moving
  window of 5 per second that no field states, while ``X-RateLimit-*`` state an hour's
  quota of 5000 (``limits``' fixed window, counting the requests let through), as GitHub
  states its primary limit and refuses by secondary ones; ``Retry-After`` on 429;
- ``moving 20/s, X-RateLimit, 4 processes``: four clients at once on one limiter of 20 per
  second (``X-RateLimit-*`` as above), the adapters of a run sharing one SQLite store (as
  workers of one job do), urllib3's four with nothing shared: what they get together;
- ``fixed 20/s, X-RateLimit, 4 processes`` and ``fixed 20/s, draft-6, 4 processes``: the
  same on ``limits``' fixed window (opened at the first hit), stated in ``X-RateLimit-*``
  and in draft-6's fields. The cases of four processes, and those of eight threads, run
  one after another, each on its own (about 10 s each).

Every case runs for each client, all at once (a forked process per client, each with a
server and a limiter of its own): RetryAfterAdapter (default policy, memory store,
environment ignored) once per seed of its jitter (``--seeds``, 0 to 3 by default), each
starting at another phase of the wall clock's second (seed ``i`` of ``n`` ``i / n`` s
later), and urllib3's ``Retry(total=5, backoff_factor=0.5, status_forcelist=[429, 503])``
once. One run decides little: where a window's end is found by own backoff's randomised
search, one seed's draw gave 0.70 or 1.00 of the allowed rate on the 10 s window; where
resets are stated in whole epoch seconds, rounded up, the start's phase in the second gave
0.62 or 0.88 on the moving window of 5 a second. Reported: successes per second,
their ratio to what the limit allows in that time (``limit * ceil(seconds / window)``, a
perfect client starting on an empty window), and refusals as a share of successes; for the
adapter the median over the seeds, and the worst seed's ratio beside it. Nothing is
asserted; exit 0 unless the script cannot run (exit 2 without ``limits``: ``pip install
limits``, or the ``bench`` extra).

With ``--second-run``, each adapter runs again on the store its first run left (a JSON file
for a single client; the cases of four processes share their SQLite file again), a whole
number of windows after its first run began, at least two windows idle: tomorrow's run of
the same job, reported as ``adapter run 2`` with the largest drop of one seed from its
first run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import platform
import socketserver
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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

try:
    import django
    import django_ratelimit
except ImportError:  # pragma: no cover - its cases are skipped, and main() says so
    django = None  # type: ignore[assignment]

ADAPTER = "adapter"
AGAIN = "adapter run 2"
BASELINE = "urllib3 Retry"

StartResponse = Callable[[str, List[Tuple[str, str]]], Any]


@dataclass(frozen=True)
class Case:
    """A limiter and the generation of headers its server sends."""

    name: str
    strategy: str  # "moving", "fixed", "sliding" (the sliding window counter) or "django"
    limit: int
    window: int
    headers: str  # "x-ratelimit", "draft6", "draft7", "none", or "hour" (a quota stated)
    slow: bool = False
    workers: int = 1  # processes at once on the limiter (the adapters share a store)
    threads: int = 1  # threads of each client, sharing its session (and adapter)

    @property
    def rate(self) -> float:
        return self.limit / self.window

    def length(self, seconds: float, slow_seconds: float) -> float:
        """The case's run: ``slow_seconds`` for a slow limiter, else ``seconds``."""
        return slow_seconds if self.slow else seconds

    def next_run(self, length: float) -> float:
        """When a second run starts after the first began: a whole number of windows later
        (the same phase of a window of the clock), after at least two windows idle."""
        return math.ceil((length + 2 * self.window) / self.window) * self.window


CASES = (
    Case("moving 5/s, X-RateLimit", "moving", 5, 1, "x-ratelimit"),
    Case("fixed 5/s, X-RateLimit", "fixed", 5, 1, "x-ratelimit"),
    Case("fixed 1 s, draft-6", "fixed", 5, 1, "draft6"),
    Case("fixed 5/s, draft-7", "fixed", 5, 1, "draft7"),
    Case("sliding counter 10/s, X-RateLimit", "sliding", 10, 1, "x-ratelimit"),
    Case("moving 10/10 s, no headers", "moving", 10, 10, "none", slow=True),
    Case("sliding counter 30/10 s, no headers", "sliding", 30, 10, "none", slow=True),
    Case("django-ratelimit 30/8 s, no headers", "django", 30, 8, "none", slow=True),
    Case("moving 5/s, X-RateLimit, 8 threads", "moving", 5, 1, "x-ratelimit", threads=8),
    Case("fixed 5/s, draft-7, 8 threads", "fixed", 5, 1, "draft7", threads=8),
    Case("moving 5/s unstated, hourly X-RateLimit, 8 threads", "moving", 5, 1, "hour", threads=8),
    Case("moving 20/s, X-RateLimit, 4 processes", "moving", 20, 1, "x-ratelimit", workers=4),
    Case("fixed 20/s, X-RateLimit, 4 processes", "fixed", 20, 1, "x-ratelimit", workers=4),
    Case("fixed 20/s, draft-6, 4 processes", "fixed", 20, 1, "draft6", workers=4),
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
        elif case.strategy == "sliding":
            self.limiter = strategies.SlidingWindowCounterRateLimiter(store)
        else:
            self.limiter = strategies.FixedWindowRateLimiter(store)
        # The hour's quota that the "hour" headers state instead of the limit.
        self.hour = parse("5000 per 1 hour")
        self.quota = strategies.FixedWindowRateLimiter(store)
        self.lock = threading.Lock()
        self.hits: List[Tuple[float, int]] = []

    def fields(self, allowed: bool) -> List[Tuple[str, str]]:
        reset_at, remaining = self.limiter.get_window_stats(self.item, "client")
        now = time.time()
        delta = max(0, math.ceil(reset_at - now))
        out: List[Tuple[str, str]] = []
        kind, limit = self.case.headers, str(self.case.limit)
        if kind == "hour":
            hour_reset, hour_remaining = self.quota.get_window_stats(self.hour, "client")
            out += [
                ("X-RateLimit-Limit", str(self.hour.amount)),
                ("X-RateLimit-Remaining", str(hour_remaining)),
                ("X-RateLimit-Reset", str(math.ceil(hour_reset))),
            ]
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
            if allowed and self.case.headers == "hour":
                self.quota.hit(self.hour, "client")
            fields = self.fields(allowed)
            self.hits.append((time.monotonic(), 200 if allowed else 429))
        body = b"ok\n" if allowed else b"Too Many Requests\n"
        status = "200 OK" if allowed else "429 Too Many Requests"
        start_response(
            status,
            [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), *fields],
        )
        return [body]


class DjangoApp:
    """A Django view limited by ``django-ratelimit`` (its decorator, ``block=False``, a bare
    429), counting ``(monotonic time, status)`` of every request. Its windows are fixed,
    of the clock's whole seconds, offset by a hash of the rate-limit key (here the server's
    port, so that each server has a counter of its own): the host's own windows, in a
    phase no client can know."""

    def __init__(self, case: Case) -> None:
        _django_setup()
        from django.core.handlers.wsgi import WSGIHandler

        self.case = case
        self.handler = WSGIHandler()
        self.lock = threading.Lock()
        self.hits: List[Tuple[float, int]] = []

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        environ["bench.rate"] = f"{self.case.limit}/{self.case.window}s"
        status: List[int] = []

        def started(line: str, fields: List[Tuple[str, str]], *info: Any) -> Any:
            status.append(int(line.split()[0]))
            return start_response(line, fields, *info)

        body = b"".join(self.handler(environ, started))
        with self.lock:
            self.hits.append((time.monotonic(), status[0] if status else 0))
        return [body]


def _django_setup() -> None:
    """Configure Django once, in this process, for :class:`DjangoApp`: no apps, a local
    memory cache (django-ratelimit's counters), one URL."""
    from django.conf import settings

    if settings.configured:
        return
    from django.http import HttpRequest, HttpResponse
    from django.urls import path
    from django_ratelimit.decorators import ratelimit

    def key(group: str, request: HttpRequest) -> str:
        return str(request.META["SERVER_PORT"])

    def rate(group: str, request: HttpRequest) -> str:
        return str(request.META["bench.rate"])

    @ratelimit(key=key, rate=rate, block=False)
    def records(request: HttpRequest) -> HttpResponse:
        if getattr(request, "limited", False):
            return HttpResponse(b"Too Many Requests\n", status=429)
        return HttpResponse(b"ok\n")

    globals()["urlpatterns"] = [path("records", records)]
    settings.configure(
        DEBUG=False,
        SECRET_KEY="bench-limiters",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
        CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    )
    django.setup()


def client(
    kind: str,
    url: str,
    start: float,
    seconds: float,
    seed: int = 0,
    store: str = "memory://",
    again: Optional[float] = None,
    threads: int = 1,
) -> None:
    """One client from ``start`` (monotonic) for ``seconds`` (the adapter's jitter drawn
    from ``seed``, its knowledge kept in ``store``), sequential or of ``threads`` threads on
    one session; with ``again``, a second run of a new adapter on the same store, ``again``
    seconds after the first began."""
    _crawl(kind, url, start, seconds, seed, store, threads)
    if again is not None:
        _crawl(kind, url, start + again, seconds, seed + 1000, store, threads)


def _crawl(
    kind: str, url: str, start: float, seconds: float, seed: int, store: str, threads: int = 1
) -> None:
    end = start + seconds
    session = requests.Session()
    if kind == ADAPTER:
        adapter: HTTPAdapter = RetryAfterAdapter(store=store, environ={}, seed=seed)
    else:
        adapter = HTTPAdapter(max_retries=bounded_retry(end), pool_maxsize=threads)
    session.mount("http://", adapter)
    time.sleep(max(0.0, start - time.monotonic()))

    def fetch() -> None:
        while time.monotonic() < end:
            try:
                session.get(url, timeout=5)
            except HostHeld as exc:
                time.sleep(max(0.0, min(exc.until - time.time(), end - time.monotonic())))
            except RetryDeadlineExceeded as exc:
                time.sleep(max(0.0, min(exc.delay, end - time.monotonic())))
            except requests.RequestException:
                pass

    pool = [threading.Thread(target=fetch, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    session.close()


@dataclass
class Result:
    """One case and client: medians over its runs (one per seed), and the worst run's ratio."""

    case: str
    client: str
    seconds: float
    allowed_rate: float
    ideal: int
    runs: int
    ok: float
    refused: float
    ok_per_s: float
    ratio: float
    worst_ratio: float
    refused_share: float
    ratios: List[float] = field(default_factory=list)
    drop_max: Optional[float] = None  # run 2: the largest run 1 - run 2 of one seed


def run(
    seconds: float,
    slow_seconds: float,
    seeds: int = 4,
    tmp: str = ".",
    workers: bool = True,
    singles: bool = True,
    second: bool = False,
) -> List[Result]:
    """Every case, the single clients' first (unless not ``singles``) and then (unless not
    ``workers``) those of several processes or threads, one case at a time (on two cores,
    twenty more processes at once would slow the other cases' servers); with ``second``,
    each adapter run twice on one store."""
    cases = [case for case in CASES if django is not None or case.strategy != "django"]
    single = [case for case in cases if case.workers == case.threads == 1] if singles else []
    several = [case for case in cases if case.workers > 1 or case.threads > 1]
    several = several if workers else []
    results = _wave(single, seconds, slow_seconds, seeds, tmp, second) if single else []
    for case in several:
        results += _wave([case], seconds, slow_seconds, seeds, tmp, second)
    return results


def _wave(
    cases: List[Case],
    seconds: float,
    slow_seconds: float,
    seeds: int,
    tmp: str,
    second: bool = False,
) -> List[Result]:
    """Serve each case once per client run (``seeds`` adapters, one urllib3 client), each
    with its own server and limiter, and run all clients at once (a case's ``workers``
    processes per run, whose adapters share an SQLite store in ``tmp``). With ``second``,
    each adapter's run is followed by another on the store it left (a JSON file in ``tmp``
    for a single client), a whole number of windows after it began (``Case.next_run``)."""
    context = multiprocessing.get_context("fork")
    servers = []
    for case in cases:
        for kind, seed in [(ADAPTER, i) for i in range(seeds)] + [(BASELINE, 0)]:
            app: Any = DjangoApp(case) if case.strategy == "django" else LimitedApp(case)
            server = make_server(
                "127.0.0.1", 0, app, server_class=_ThreadingServer, handler_class=_Quiet
            )
            servers.append((case, kind, seed, app, server))
    # Fork the clients before any thread starts here (forking a threaded process can
    # deadlock); they wait for ``start``, the servers listen already and serve from below.
    start = time.monotonic() + 1.0
    procs = []
    # Seed i of n starts i / n s later: the runs spread over the phases of a second.
    begins = [start + (seed / seeds if kind == ADAPTER else 0.0) for _, kind, seed, *_ in servers]
    for (case, kind, seed, _, server), begin in zip(servers, begins):
        length = case.length(seconds, slow_seconds)
        port = server.server_address[1]
        url = f"http://127.0.0.1:{port}/records"
        store = f"sqlite:///{tmp}/limiter-{port}.db" if case.workers > 1 else "memory://"
        if second and case.workers == 1:
            store = f"json://{tmp}/limiter-{port}.json"
        again = case.next_run(length) if second and kind == ADAPTER else None
        for worker in range(case.workers):
            proc = context.Process(
                target=client,
                args=(
                    kind,
                    url,
                    begin,
                    length,
                    seed * case.workers + worker,
                    store,
                    again,
                    case.threads,
                ),
                daemon=True,
            )
            proc.start()
            procs.append(proc)
    for *_, server in servers:
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    longest = 1.0 + max(
        case.length(seconds, slow_seconds)
        + (case.next_run(case.length(seconds, slow_seconds)) if second else 0.0)
        for case in cases
    )
    for proc in procs:
        proc.join(timeout=max(0.0, start + longest + 2.0 - time.monotonic()))
    for proc in procs:
        if proc.is_alive():  # asleep in a wait past the end of its run
            proc.terminate()
            proc.join(timeout=5)
    counts: Dict[Tuple[str, str], List[Tuple[int, int]]] = {}
    for (case, kind, _, app, server), begin in zip(servers, begins):
        server.shutdown()
        server.server_close()
        length = case.length(seconds, slow_seconds)
        spans = [(kind, 0.0)]
        if second and kind == ADAPTER:
            spans.append((AGAIN, case.next_run(length)))
        for label, offset in spans:
            with app.lock:
                hits = [(t - begin, s) for t, s in app.hits if 0.0 <= t - begin - offset < length]
            ok = sum(1 for _, s in hits if s == 200)
            counts.setdefault((case.name, label), []).append((ok, len(hits) - ok))
    results = []
    for case in cases:
        length = case.length(seconds, slow_seconds)
        ideal = case.limit * math.ceil(length / case.window)
        for kind in (ADAPTER, AGAIN, BASELINE) if second else (ADAPTER, BASELINE):
            runs = counts[(case.name, kind)]
            oks = [ok for ok, _ in runs]
            firsts = [ok for ok, _ in counts[(case.name, ADAPTER)]]
            drop = max(a - b for a, b in zip(firsts, oks)) / ideal if kind == AGAIN else None
            ok = statistics.median(oks)
            refused = statistics.median(r for _, r in runs)
            shares = [r / o if o else float(r > 0) for o, r in runs]
            results.append(
                Result(
                    case=case.name,
                    client=kind,
                    seconds=length,
                    allowed_rate=case.rate,
                    ideal=ideal,
                    runs=len(runs),
                    ok=ok,
                    refused=refused,
                    ok_per_s=round(ok / length, 2),
                    ratio=round(ok / ideal, 3),
                    worst_ratio=round(min(oks) / ideal, 3),
                    refused_share=round(statistics.median(shares), 4),
                    ratios=[round(o / ideal, 3) for o in oks],
                    drop_max=None if drop is None else round(drop, 3),
                )
            )
    return results


def markdown(results: List[Result]) -> str:
    header = (
        "| limiter | client | s | allowed r/s | runs | ok | 429 | ok/s "
        "| ok / allowed (worst run) | 429 / ok | run 2 drop max |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        drop = "" if r.drop_max is None else f"{r.drop_max:+.2f}"
        lines.append(
            f"| {r.case} | {r.client} | {r.seconds:g} | {r.allowed_rate:g} | {r.runs} "
            f"| {r.ok:g} | {r.refused:g} | {r.ok_per_s:.1f} | {r.ratio:.2f} ({r.worst_ratio:.2f}) "
            f"| {r.refused_share:.1%} | {drop} |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="each 1 s-window case")
    parser.add_argument(
        "--slow-seconds", type=float, default=25.0, help="the 10 s moving window case"
    )
    parser.add_argument(
        "--seeds", type=int, default=4, help="adapter runs per case, one per jitter seed"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--no-workers",
        action="store_true",
        help="skip the cases of several processes or threads (CI runs this script beside "
        "bench_nginx, whose last 10 s their twenty processes would crowd)",
    )
    parser.add_argument(
        "--workers-only",
        action="store_true",
        help="only the cases of several processes or threads (CI runs them on their own, "
        "after the rest)",
    )
    parser.add_argument(
        "--second-run",
        action="store_true",
        help="run each adapter a second time on the store its first run left (a whole "
        "number of windows after the first began, at least two windows idle), and report "
        "that run beside the first",
    )
    args = parser.parse_args(argv)
    if args.no_workers and args.workers_only:
        parser.error("--no-workers and --workers-only leave nothing to run")
    if not (2 <= args.seconds <= 30 and 5 <= args.slow_seconds <= 60 and 1 <= args.seeds <= 16):
        parser.error("--seconds must be 2..30, --slow-seconds 5..60 and --seeds 1..16")
    if limits is None:
        print("bench_limiters: the 'limits' package is missing (pip install limits)")
        return 2
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-limiters-") as tmp:
        results = run(
            args.seconds,
            args.slow_seconds,
            args.seeds,
            tmp,
            workers=not args.no_workers,
            singles=not args.workers_only,
            second=args.second_run,
        )
    wall = time.perf_counter() - began
    print(markdown(results))
    print(
        "\nok / allowed: successes over limit * ceil(seconds / window), what a perfect client "
        "starting on an empty window gets; medians over the runs (the adapter's: one per "
        "jitter seed), the worst run's ratio in brackets. Reported, not asserted."
    )
    django_version = (
        "missing (pip install django django-ratelimit: its case skipped)"
        if django is None
        else f"{django_ratelimit.__version__} (Django {django.__version__})"
    )
    versions = f"limits {limits.__version__}; django-ratelimit {django_version}"
    print(f"\nWall time: {wall:.1f} s; {versions}.")
    if args.json:
        document = {
            "benchmark": "bench_limiters",
            "python": platform.python_version(),
            "requests": requests.__version__,
            "urllib3": urllib3.__version__,
            "limits": limits.__version__,
            "django_ratelimit": None if django is None else django_ratelimit.__version__,
            "wall_s": round(wall, 3),
            "results": [dataclasses.asdict(r) for r in results],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
