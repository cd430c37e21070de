#!/usr/bin/env python
"""Crawl a real nginx ``limit_req`` (10 r/s) in real time, with RetryAfterAdapter and with
urllib3's Retry.

    python benchmarks/bench_nginx.py [--seconds 35] [--quick | --ci] [--json FILE] [--nginx PATH]
                                     [--second-run]

nginx is started here (no daemon, config, pid and logs in a temporary directory, on free
ports of 127.0.0.1) with one ``server`` per case, each with its own zone::

    limit_req_zone $binary_remote_addr zone=zN:1m rate=10r/s;
    limit_req zone=zN [burst=5] nodelay;
    limit_req_status 429;

and, on 429s only, ``Retry-After: 0``, ``1``, ``3600``, a date in the past, or nothing (``add_header
Retry-After $ra always`` with ``$ra`` mapped from ``$status``). Every case gets its own port,
so it is its own host to the adapter and its own budget to nginx.

Clients, all at once in two waves of ``--seconds`` each (forked processes, started together;
with ``--ci``, CI's shorter run, one wave of both kinds, the variants of ``--quick``, and no
urllib3 groups of 4):

- wave 1: one sequential client per case, RetryAfterAdapter (default policy, memory store,
  environment ignored) from a cold start, the same with urllib3's ``Retry(total=5,
  backoff_factor=0.5, status_forcelist=[429, 503])`` on a plain HTTPAdapter, and one process
  of 8 threads sharing one session with one adapter (``adapter x8 threads``: a thread pool,
  as many jobs fetch; judged by a single client's targets);
- wave 2: 4 processes per case sharing one Redis store (``REQUESTS_RETRYAFTER_TEST_REDIS_URL``,
  else a redis-server started here), and 4 urllib3 processes on the cases without a header.

What each client got is counted from nginx's own access log (every request on the wire,
retries included): ok/s over the first 30 s and over the last 10 s, and 429s as a share of
successes. The targets of issue #10 are marked PASS/FAIL; the script never fails on a miss
(exit 0), only when it cannot run at all (exit 2 when nginx is missing: see .ci/nginx.sh).

With ``--second-run``, every adapter client runs again, :data:`IDLE` s after its first run
ended, on the store its first run left (a JSON file for a single client, the same Redis keys
for a group of 4): tomorrow's run of the same job, reported as ``... run 2`` rows (no
targets: those are a cold start's). urllib3's clients run once.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import platform
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import requests
import urllib3
from _realtime import bounded_retry  # benchmarks/_realtime.py
from requests.adapters import HTTPAdapter

from requests_retryafter import HostHeld, RetryAfterAdapter, RetryDeadlineExceeded

RATE = 10.0
#: What each Retry-After variant sends on 429s ("" sends no header).
RETRY_AFTER = {
    "none": "",
    "0": "0",
    "1": "1",
    "3600": "3600",
    "past": "Wed, 21 Oct 2015 07:28:00 GMT",
}
BURSTS = (0, 5)
#: The window ok/s is first judged on, and the closing window.
FIRST_S = 30.0
LAST_S = 10.0
#: Targets (issue #10): ok/s by the end of the first 30 s, 429s per success.
OK_TARGET = 8.0
PROCS = 4
THREADS = 8
ADAPTER_THREADS = f"adapter x{THREADS} threads"
SHARE_TARGET = {"adapter": 0.05, "adapter x4": 0.10, ADAPTER_THREADS: 0.05}
#: Seconds between an adapter's first run and its second (``--second-run``): nginx's bucket
#: refills in one.
IDLE = 5.0

ADAPTER = "adapter"
BASELINE = "urllib3 Retry"
ADAPTER_X4 = "adapter x4"
BASELINE_X4 = "urllib3 Retry x4"


@dataclass
class Case:
    """One server block: a limit_req variant, the client kind that uses it, its port."""

    burst: int
    retry_after: str
    client: str
    port: int = 0
    zone: str = ""

    @property
    def label(self) -> str:
        return f"burst={self.burst} Retry-After {self.retry_after}"


@dataclass
class Result:
    """What nginx saw from one case's clients, and what the clients saw."""

    variant: str
    client: str
    processes: int
    seconds: float
    ok: int
    refused: int
    ok_per_s_first: float
    ok_per_s_last: float
    refused_share: float
    first_ok_s: Optional[float]
    client_errors: Dict[str, int]
    held: int
    targets: Dict[str, bool] = field(default_factory=dict)


# -- nginx ---------------------------------------------------------------------------------------


def free_port() -> int:
    """A port of 127.0.0.1 free just now."""
    return free_ports(1)[0]


def free_ports(count: int) -> List[int]:
    """``count`` distinct ports of 127.0.0.1 free just now. The sockets stay bound until all
    are chosen: one at a time, the system may hand the same port out twice (two cases on one
    port would share one server block, and each would report both's figures)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def find_nginx(explicit: Optional[str]) -> Optional[str]:
    """The nginx binary: ``explicit``, on PATH, or Debian's /usr/sbin/nginx."""
    for candidate in (explicit, shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def nginx_config(cases: List[Case], root: str) -> str:
    """One ``server`` per case; the access log records time, port and status."""
    zones = "\n".join(
        f"    limit_req_zone $binary_remote_addr zone={c.zone}:1m rate={RATE:g}r/s;" for c in cases
    )
    maps = "\n".join(
        f'    map $status $ra_{key} {{ 429 "{value}"; default ""; }}'
        for key, value in RETRY_AFTER.items()
    )
    servers = []
    for c in cases:
        burst = f" burst={c.burst}" if c.burst else ""
        servers.append(
            f"""    server {{
        listen 127.0.0.1:{c.port};
        location / {{
            limit_req zone={c.zone}{burst} nodelay;
            limit_req_status 429;
            add_header Retry-After $ra_{c.retry_after} always;
            try_files /ok.txt =404;
        }}
    }}"""
        )
    user = "user nobody nogroup;\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format bench '$msec $server_port $status';
    access_log {root}/access.log bench;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    keepalive_requests 100000;
    root {root}/www;
{zones}
{maps}
{chr(10).join(servers)}
}}
"""


@contextlib.contextmanager
def running_nginx(binary: str, cases: List[Case]) -> Iterator[str]:
    """Start nginx for ``cases`` (filling in ports and zones); yield its access log path."""
    root = tempfile.mkdtemp(prefix="bench-nginx-")
    os.chmod(root, 0o755)
    os.makedirs(os.path.join(root, "www"))
    with open(os.path.join(root, "www", "ok.txt"), "w", encoding="utf-8") as fh:
        fh.write("ok\n")
    os.chmod(os.path.join(root, "www", "ok.txt"), 0o644)
    for index, (case, port) in enumerate(zip(cases, free_ports(len(cases)))):
        case.port = port
        case.zone = f"z{index}"
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w", encoding="utf-8") as fh:
        fh.write(nginx_config(cases, root))
    proc = subprocess.Popen(
        [binary, "-p", root, "-c", conf],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"nginx exited at start: {err.strip()}")
            try:
                requests.get(f"http://127.0.0.1:{cases[-1].port}/", timeout=1)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise RuntimeError("nginx did not answer within 10 s") from None
                time.sleep(0.1)
        time.sleep(1.1)  # let the probe's bucket refill
        yield os.path.join(root, "access.log")
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def read_log(path: str) -> List[Tuple[float, int, int]]:
    """(epoch, port, status) of every request nginx logged."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 3:
                entries.append((float(parts[0]), int(parts[1]), int(parts[2])))
    return entries


# -- Redis -------------------------------------------------------------------------------------


@contextlib.contextmanager
def redis_url() -> Iterator[Optional[str]]:
    """REQUESTS_RETRYAFTER_TEST_REDIS_URL, else a throw-away redis-server, else None."""
    given = os.environ.get("REQUESTS_RETRYAFTER_TEST_REDIS_URL")
    if given:
        yield given
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    root = tempfile.mkdtemp(prefix="bench-redis-")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def with_prefix(url: str, prefix: str) -> str:
    """``url`` with a key prefix (and a TTL) of this run, so no one's keys are touched."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}prefix={prefix}&ttl=600"


# -- clients -------------------------------------------------------------------------------------


def client(
    kind: str,
    url: str,
    start: float,
    seconds: float,
    store: Optional[str],
    seed: int,
    out: Any,
    again: Optional[float] = None,
) -> None:
    """One client from ``start`` (monotonic) for ``seconds`` (a sequential one; of ``kind``
    ``"threads"``, :data:`THREADS` threads sharing its session); puts ``(url,
    event)`` on ``out`` for each exception it gets (an adapter's sleep may outlast the run:
    the process is then ended, and nginx's log has every request anyway). With ``again``, a
    second run of a new adapter on the same ``store``, ``again`` s after the first began."""
    _crawl(kind, url, start, seconds, store, seed, out)
    if again is not None:
        _crawl(kind, url, start + again, seconds, store, seed + 1000, out)


def _crawl(
    kind: str, url: str, start: float, seconds: float, store: Optional[str], seed: int, out: Any
) -> None:
    end = start + seconds
    session = requests.Session()
    if kind in ("adapter", "threads"):
        adapter: HTTPAdapter = RetryAfterAdapter(store=store, environ={}, seed=seed)
    else:
        adapter = HTTPAdapter(max_retries=bounded_retry(end))
    session.mount("http://", adapter)
    time.sleep(max(0.0, start - time.monotonic()))
    if kind == "threads":
        crawlers = [
            threading.Thread(target=_loop, args=(session, url, end, out)) for _ in range(THREADS)
        ]
        for crawler in crawlers:
            crawler.start()
        for crawler in crawlers:
            crawler.join()
    else:
        _loop(session, url, end, out)
    session.close()


def _loop(session: requests.Session, url: str, end: float, out: Any) -> None:
    """Fetch ``url`` one request after another until ``end`` (monotonic)."""
    while time.monotonic() < end:
        left = end - time.monotonic()
        try:
            session.get(url, timeout=min(5.0, max(0.1, left)))
        except HostHeld as exc:
            out.put((url, "HostHeld"))
            time.sleep(max(0.0, min(exc.until - time.time(), end - time.monotonic())))
        except RetryDeadlineExceeded as exc:
            out.put((url, "RetryDeadlineExceeded"))
            time.sleep(max(0.0, min(exc.delay, end - time.monotonic())))
        except requests.RequestException as exc:
            out.put((url, type(exc).__name__))


def finish(procs: List[Any], end: float, out: Any) -> Dict[str, Dict[str, int]]:
    """Wait for the clients (``procs``, started to stop at ``end``, monotonic) and end those
    still asleep in a wait past it; return what they put on ``out``: for each URL, how many
    times each exception came."""
    for proc in procs:
        proc.join(timeout=max(0.0, end + 2.0 - time.monotonic()))
    for proc in procs:
        if proc.is_alive():  # asleep in a wait past the end of the run
            proc.terminate()
            proc.join(timeout=5)
    events: Dict[str, Dict[str, int]] = {}
    with contextlib.suppress(queue.Empty):
        while True:
            url, name = out.get(timeout=0.2)
            counts = events.setdefault(url, {})
            counts[name] = counts.get(name, 0) + 1
    return events


def run_wave(
    binary: str,
    plan: List[Tuple[Case, int]],
    seconds: float,
    store_url: Optional[str],
    second: bool = False,
) -> List[Result]:
    """Serve every case of ``plan`` (case, processes) and run all their clients at once;
    with ``second``, each adapter client again on its store (see :func:`client`)."""
    cases = [case for case, _ in plan]
    again = seconds + IDLE if second else None
    tmp = tempfile.mkdtemp(prefix="bench-nginx-stores-") if second else None
    context = multiprocessing.get_context("fork")
    with running_nginx(binary, cases) as log:
        out = context.Queue()
        start = time.monotonic() + 1.0  # every process forked and waiting before it
        wall_start = time.time() + (start - time.monotonic())
        procs = []
        prefix = f"bench_nginx:{uuid.uuid4().hex[:12]}:"
        for case, count in plan:
            url = f"http://127.0.0.1:{case.port}/records"
            kind = "urllib3"
            if case.client == ADAPTER_THREADS:
                kind = "threads"
            elif case.client.startswith(ADAPTER):
                kind = "adapter"
            store = None
            if count > 1 and kind == "adapter":
                store = with_prefix(store_url, prefix) if store_url else None
            elif tmp is not None and kind != "urllib3":
                store = f"json://{tmp}/{case.port}.json"
            rerun = again if kind != "urllib3" else None
            for seed in range(count):
                proc = context.Process(
                    target=client,
                    args=(kind, url, start, seconds, store, seed, out, rerun),
                    daemon=True,
                )
                proc.start()
                procs.append(proc)
        events = finish(procs, start + seconds + (again or 0.0), out)
        time.sleep(0.5)  # nginx writes its log line after the answer
        entries = read_log(log)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    results = []
    for case, count in plan:
        mine = [(t - wall_start, status) for t, port, status in entries if port == case.port]
        errors = dict(events.get(f"http://127.0.0.1:{case.port}/records", {}))
        held = errors.pop("HostHeld", 0)
        results.append(summarise(case, count, seconds, mine, errors, held))
        if again is not None and case.client.startswith(ADAPTER):
            # (the clients' exceptions are counted over both runs, in the first run's row)
            later = dataclasses.replace(case, client=f"{case.client} run 2")
            shifted = [(t - again, status) for t, status in mine]
            results.append(summarise(later, count, seconds, shifted, {}, 0))
    return results


def summarise(
    case: Case,
    count: int,
    seconds: float,
    hits: List[Tuple[float, int]],
    errors: Dict[str, int],
    held: int,
) -> Result:
    """Count one case's wire requests (``(seconds from start, status)``) and judge them."""
    hits = [(t, s) for t, s in hits if 0.0 <= t < seconds]
    ok = sum(1 for _, s in hits if s == 200)
    refused = sum(1 for _, s in hits if s == 429)
    first = min(FIRST_S, seconds)
    last_from = max(0.0, seconds - LAST_S)
    ok_first = sum(1 for t, s in hits if s == 200 and t < first) / first
    ok_last = sum(1 for t, s in hits if s == 200 and t >= last_from) / (seconds - last_from)
    first_ok = min((t for t, s in hits if s == 200), default=None)
    result = Result(
        variant=case.label,
        client=case.client,
        processes=count,
        seconds=seconds,
        ok=ok,
        refused=refused,
        ok_per_s_first=round(ok_first, 2),
        ok_per_s_last=round(ok_last, 2),
        refused_share=round(refused / ok, 4) if ok else float(refused > 0),
        first_ok_s=None if first_ok is None else round(first_ok, 3),
        client_errors=errors,
        held=held,
    )
    if case.client in SHARE_TARGET:
        result.targets[f"ok/s >= {OK_TARGET:g} (last {LAST_S:g} s)"] = ok_last >= OK_TARGET
        share = SHARE_TARGET[case.client]
        result.targets[f"429s <= {share:.0%}"] = result.refused_share <= share
    return result


# -- report ------------------------------------------------------------------------------------


def markdown(results: List[Result]) -> str:
    header = (
        "| limit_req | client | procs | ok | 429 | ok/s first 30 s | ok/s last 10 s "
        "| 429 / ok | ok/s target | 429 target |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        marks = ["PASS" if ok else "FAIL" for ok in r.targets.values()] or ["", ""]
        lines.append(
            f"| {r.variant} | {r.client} | {r.processes} | {r.ok} | {r.refused} "
            f"| {r.ok_per_s_first:.1f} | {r.ok_per_s_last:.1f} | {r.refused_share:.1%} "
            f"| {marks[0]} | {marks[1]} |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=35.0, help="length of each wave (default 35)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="only the variants without a header and with 0"
    )
    parser.add_argument(
        "--ci",
        action="store_true",
        help="CI's shorter run: --quick's variants, and both waves at once (each case is its "
        "own port and nginx zone, so they do not share a budget); no urllib3 x4 groups",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--nginx", metavar="PATH", help="the nginx binary (default: on PATH)")
    parser.add_argument(
        "--second-run",
        action="store_true",
        help=f"run every adapter client again, {IDLE:g} s after its first run, on the store "
        "that run left, and report that run beside it",
    )
    args = parser.parse_args(argv)
    if args.ci:
        args.quick = True
    if not 5 <= args.seconds <= 35:
        parser.error("--seconds must be between 5 and 35")
    binary = find_nginx(args.nginx)
    if binary is None:
        print("bench_nginx: nginx not found (bash .ci/nginx.sh installs it)", file=sys.stderr)
        return 2
    variants = [
        (b, ra) for b in BURSTS for ra in RETRY_AFTER if not args.quick or ra in ("none", "0")
    ]
    began = time.perf_counter()
    results: List[Result] = []
    clients = (ADAPTER, BASELINE, ADAPTER_THREADS)
    wave1 = [(Case(b, ra, client), 1) for b, ra in variants for client in clients]
    wave2 = [(Case(b, ra, ADAPTER_X4), PROCS) for b, ra in variants]
    if not args.ci:
        wave2 += [(Case(b, "none", BASELINE_X4), PROCS) for b in BURSTS]
    with redis_url() as url:
        if url is None:
            print(
                "wave 2 skipped: no Redis (set REQUESTS_RETRYAFTER_TEST_REDIS_URL)", file=sys.stderr
            )
            wave2 = []
        # --ci: one wave of both; every case is its own port and zone, so nothing is shared
        waves = [wave1 + wave2] if args.ci else [wave1, wave2]
        for number, plan in enumerate(waves, 1):
            if not plan:
                continue
            singles = sum(1 for _, count in plan if count == 1)
            print(
                f"wave {number}: {singles} single clients, {len(plan) - singles} groups of "
                f"{PROCS} processes for {args.seconds:g} s",
                file=sys.stderr,
            )
            results += run_wave(binary, plan, args.seconds, url, args.second_run)
    wall = time.perf_counter() - began
    results.sort(key=lambda r: (r.variant.split()[0], "x4" in r.client, r.variant, r.client))
    print(markdown(results))
    judged = [(r, name, ok) for r in results for name, ok in r.targets.items()]
    met = sum(1 for _, _, ok in judged if ok)
    print(f"\nTargets met: {met}/{len(judged)} (reported, not asserted).")
    for r, name, ok in judged:
        if not ok:
            print(f"- {r.variant}, {r.client}: {name} missed")
    print(f"\nWall time: {wall:.1f} s; nginx {nginx_version(binary)}.")
    if args.json:
        document = {
            "benchmark": "bench_nginx",
            "rate": RATE,
            "seconds": args.seconds,
            "ci": args.ci,
            "second_run": args.second_run,
            "python": platform.python_version(),
            "requests": requests.__version__,
            "urllib3": urllib3.__version__,
            "nginx": nginx_version(binary),
            "wall_s": round(wall, 3),
            "results": [dataclasses.asdict(r) for r in results],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


def nginx_version(binary: str) -> str:
    """``nginx -v``'s version, e.g. ``1.22.1``."""
    proc = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    text = (proc.stderr or proc.stdout).strip()
    return text.rsplit("/", 1)[-1] if "/" in text else text


if __name__ == "__main__":
    sys.exit(main())
