#!/usr/bin/env python
"""Crawl a real HAProxy rate limit (a sliding window counter that counts refused requests
too, no header) in real time, with RetryAfterAdapter and with urllib3's Retry.

    python benchmarks/bench_haproxy.py [--seconds 60] [--seeds 3] [--long] [--json FILE]
                                       [--haproxy PATH] [--second-run [IDLE]]

HAProxy (Debian's ``haproxy`` package) is started here, in the foreground, with its
configuration in a temporary directory and one frontend per client on a free port of
127.0.0.1, each with its own table, as API gateways commonly limit by address::

    stick-table type ip size 1k expire 120s store http_req_rate(<period>)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt <limit> }
    http-request return status 200 content-type text/plain string ok

HAProxy's ``http_req_rate`` is a sliding window counter: the current period's count plus
the previous period's, weighed by the share of the period still to come. The request is
tracked before it is denied, so every refused request counts too, and no header says
anything. Cases: ``10 per 1 s`` and ``20 per 10 s``; with ``--long``, also ``100 per 60
s`` (a per-minute limit, as gateways commonly set; run ``--seconds 240`` or more to see
its windows pass).

Clients, all at once, each a forked process with its own frontend: RetryAfterAdapter
(default policy, memory store, environment ignored) once per seed of its jitter
(``--seeds``), and urllib3's ``Retry(total=5, backoff_factor=0.5, status_forcelist=[429,
503])`` once. What each got is counted from HAProxy's own log (every request on the wire,
retries included): ok/s over the first 30 s and over the last 20 s, as a share of the
limit's rate, and 429s as a share of successes. Nothing is asserted; exit 0 unless the
script cannot run (exit 2 without HAProxy: ``apt-get install haproxy``).

With ``--second-run [IDLE]``, every adapter runs again IDLE s (default 25: more than two of
the 10 s periods, so its counter is idle) after its first run ended, on the JSON store its
first run left: tomorrow's run of the same job, reported as ``RetryAfterAdapter run 2``.
urllib3's clients run once.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import requests
import urllib3
from bench_nginx import client, finish, free_ports  # benchmarks/bench_nginx.py

ADAPTER = "RetryAfterAdapter"
URLLIB3 = "urllib3 Retry"
#: (label, HAProxy period, limit per period)
CASES: Tuple[Tuple[str, str, int], ...] = (("10 per 1 s", "1s", 10), ("20 per 10 s", "10s", 20))
#: The case ``--long`` adds.
LONG_CASE: Tuple[str, str, int] = ("100 per 60 s", "60s", 100)
FIRST_S = 30.0
LAST_S = 20.0


@dataclass
class Frontend:
    """One client's frontend: its case, its client, its port."""

    case: str
    period: str
    limit: int
    client: str
    seed: int
    port: int = 0

    @property
    def rate(self) -> float:
        """What the limit allows, in requests per second."""
        return self.limit / float(self.period.rstrip("s"))


@dataclass
class Result:
    """What HAProxy saw from one client."""

    case: str
    client: str
    seed: int
    ok: int
    refused: int
    ok_per_s_first: float
    ok_per_s_last: float
    share_first: float
    share_last: float
    refused_share: float
    client_errors: Dict[str, int]


def find_haproxy(explicit: Optional[str]) -> Optional[str]:
    """The HAProxy binary: ``explicit``, else on ``PATH``, else Debian's ``/usr/sbin``."""
    for candidate in (explicit, shutil.which("haproxy"), "/usr/sbin/haproxy"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def config(frontends: List[Frontend]) -> str:
    """HAProxy's configuration: one frontend per client, each with its own table; every
    request logged as ``<epoch seconds>.<ms> <frontend port> <status>`` on stdout."""
    lines = [
        "global",
        "  maxconn 256",
        "defaults",
        "  mode http",
        "  log stdout format raw local0 info",
        "  option dontlognull",
        '  log-format "%Ts.%ms %fp %ST"',
        "  timeout client 10s",
        "  timeout connect 5s",
        "  timeout server 10s",
    ]
    for i, fe in enumerate(frontends):
        lines += [
            f"frontend fe{i}",
            f"  bind 127.0.0.1:{fe.port}",
            "  log global",
            f"  stick-table type ip size 1k expire 120s store http_req_rate({fe.period})",
            "  http-request track-sc0 src",
            f"  http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {fe.limit} }}",
            "  http-request return status 200 content-type text/plain string ok",
        ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def running_haproxy(binary: str, frontends: List[Frontend]) -> Iterator[str]:
    """Run HAProxy in the foreground on ``frontends``; yield the path of its log."""
    with tempfile.TemporaryDirectory(prefix="bench-haproxy-") as root:
        path, log = os.path.join(root, "haproxy.cfg"), os.path.join(root, "access.log")
        with open(path, "w") as fh:
            fh.write(config(frontends))
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [binary, "-f", path, "-db"], stdout=out, stderr=subprocess.DEVNULL
            )
            try:
                time.sleep(0.5)
                if proc.poll() is not None:
                    raise RuntimeError(f"haproxy exited with {proc.returncode}")
                yield log
            finally:
                proc.terminate()
                proc.wait(timeout=10)


def read_log(path: str) -> List[Tuple[float, int, int]]:
    """``(epoch seconds, frontend port, status)`` of every request HAProxy logged."""
    entries = []
    with open(path) as fh:
        for line in fh:
            parts = line.split()
            with contextlib.suppress(ValueError, IndexError):
                entries.append((float(parts[0]), int(parts[1]), int(parts[2])))
    return entries


def run(
    binary: str, seconds: float, seeds: int, long: bool = False, idle: Optional[float] = None
) -> List[Result]:
    """Every case's clients at once (with :data:`LONG_CASE` if ``long``), each on its own
    frontend; with ``idle``, each adapter again ``idle`` s after its first run, on the store
    that run left."""
    cases = (*CASES, LONG_CASE) if long else CASES
    frontends = [
        Frontend(label, period, limit, kind, seed)
        for label, period, limit in cases
        for kind, seed in [*((ADAPTER, s) for s in range(seeds)), (URLLIB3, 0)]
    ]
    for fe, port in zip(frontends, free_ports(len(frontends))):
        fe.port = port
    context = multiprocessing.get_context("fork")
    again = None if idle is None else seconds + idle
    tmp = tempfile.mkdtemp(prefix="bench-haproxy-stores-")
    with running_haproxy(binary, frontends) as log:
        out = context.Queue()
        start = time.monotonic() + 1.0
        wall_start = time.time() + (start - time.monotonic())
        procs = []
        for fe in frontends:
            url = f"http://127.0.0.1:{fe.port}/r"
            kind = "adapter" if fe.client == ADAPTER else "urllib3"
            store, rerun = None, None  # no store: memory
            if again is not None and kind == "adapter":
                store, rerun = f"json://{tmp}/{fe.port}.json", again
            args = (kind, url, start, seconds, store, fe.seed, out, rerun)
            procs.append(context.Process(target=client, args=args, daemon=True))
            procs[-1].start()
        errors = finish(procs, start + seconds + (again or 0.0), out)
        time.sleep(0.5)  # HAProxy writes its log line after the answer
        entries = read_log(log)
    shutil.rmtree(tmp, ignore_errors=True)
    results = []
    for fe in frontends:
        mine = [(t - wall_start, s) for t, p, s in entries if p == fe.port]
        results.append(summarise(fe, seconds, mine, errors))
        if again is not None and fe.client == ADAPTER:
            later = dataclasses.replace(fe, client=f"{ADAPTER} run 2")
            results.append(summarise(later, seconds, [(t - again, s) for t, s in mine], {}))
    return results


def summarise(
    fe: Frontend, seconds: float, hits: List[Tuple[float, int]], errors: Dict[str, Dict[str, int]]
) -> Result:
    """Count one client's wire requests (``(seconds from start, status)``)."""
    hits = [(t, s) for t, s in hits if 0.0 <= t < seconds]
    ok = sum(1 for _, s in hits if s == 200)
    refused = sum(1 for _, s in hits if s == 429)
    first, last_from = min(FIRST_S, seconds), max(0.0, seconds - LAST_S)
    ok_first = sum(1 for t, s in hits if s == 200 and t < first) / first
    ok_last = sum(1 for t, s in hits if s == 200 and t >= last_from) / (seconds - last_from)
    return Result(
        case=fe.case,
        client=fe.client,
        seed=fe.seed,
        ok=ok,
        refused=refused,
        ok_per_s_first=round(ok_first, 2),
        ok_per_s_last=round(ok_last, 2),
        share_first=round(ok_first / fe.rate, 3),
        share_last=round(ok_last / fe.rate, 3),
        refused_share=round(refused / ok, 4) if ok else float(refused > 0),
        client_errors=errors.get(f"http://127.0.0.1:{fe.port}/r", {}),
    )


def markdown(results: List[Result]) -> str:
    header = (
        "| limit | client | seed | ok | 429 | ok/s first 30 s | ok/s last 20 s "
        "| of the limit (first / last) | 429 / ok |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        lines.append(
            f"| {r.case} | {r.client} | {r.seed} | {r.ok} | {r.refused} "
            f"| {r.ok_per_s_first:.2f} | {r.ok_per_s_last:.2f} "
            f"| {r.share_first:.2f} / {r.share_last:.2f} | {r.refused_share:.1%} |"
        )
    return "\n".join(lines)


def haproxy_version(binary: str) -> str:
    with contextlib.suppress(Exception):
        text = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10).stdout
        return text.splitlines()[0]
    return "unknown"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="run length (default 60)")
    parser.add_argument("--seeds", type=int, default=3, help="adapter clients per case")
    parser.add_argument(
        "--long", action="store_true", help="also 100 per 60 s (run --seconds 240 or more)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--haproxy", metavar="PATH", help="the haproxy binary")
    parser.add_argument(
        "--second-run",
        metavar="IDLE",
        type=float,
        nargs="?",
        const=25.0,
        help="run every adapter again IDLE s (default 25) after its first run, on the store "
        "that run left, and report that run beside it",
    )
    args = parser.parse_args(argv)
    if args.seconds <= LAST_S or args.seeds < 1:
        parser.error(f"--seconds must be over {LAST_S:g} and --seeds at least 1")
    binary = find_haproxy(args.haproxy)
    if binary is None:
        print("haproxy not found (apt-get install haproxy, or --haproxy PATH)", file=sys.stderr)
        return 2
    results = run(binary, args.seconds, args.seeds, args.long, args.second_run)
    print(
        f"{haproxy_version(binary)}; {args.seconds:g} s; Python {platform.python_version()}, "
        f"urllib3 {urllib3.__version__}, requests {requests.__version__}\n"
    )
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([dataclasses.asdict(r) for r in results], fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
