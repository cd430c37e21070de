#!/usr/bin/env python
"""What each store costs: opening a store of 10,000 hosts, get() and update().

    python benchmarks/bench_stores.py [--hosts 10000] [--gets 20000] [--json FILE]

For each backend (memory, json, sqlite, shelve, and redis when REQUESTS_RETRYAFTER_TEST_REDIS_URL
is set or a local ``redis-server`` can be started on a free port), in one process:

- ``open+get s``: a store already holding ``--hosts`` hosts (each with four observations and a
  learned limit) is opened and one host read, best of 5. Target: under 0.5 s for json and
  sqlite.
- ``get µs``: one get() of a stored host, the host read again and again (the adapter's case: a
  healthy host's state is read before each request). Median of 5 rounds.
- ``update µs``: one update() of a stored host (read-modify-write under the store's lock), in
  the 10,000-host store and in a store of ``--small`` (100) hosts, a more usual size for a job.
- ``x memory``: the same cost as a multiple of MemoryStore's, measured in the same process
  a moment before, so that the ratio does not depend on the machine's speed.

The stores are filled in bulk in each backend's own format (filling a JSON store with 10,000
separate updates would take minutes, as each rewrites the file). Nothing is asserted; the
targets are shown as PASS/FAIL. The per-request cost of the adapter is measured by
bench_overhead.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, List, Optional, Tuple

from requests_retryafter.state import HostState, LimitEstimate, Observation
from requests_retryafter.stores import MemoryStore, open_store

REDIS_URL_VAR = "REQUESTS_RETRYAFTER_TEST_REDIS_URL"
OPEN_TARGET_S = 0.5
TARGETED = ("json", "sqlite")
PROBE = "h5000.example.org"


def make_state(i: int) -> HostState:
    """A host as a job that met rate limits would leave it: four observations, a limit."""
    host = f"h{i}.example.org"
    state = HostState(
        host=host,
        category="constant_overstated",
        evidence="Retry-After said 3600 s four times; recovered after 18-25 s",
        limit=LimitEstimate(rate=0.66, window=60.0, updated_at=1_700_000_000.0 + i),
        limit_history=((1_700_000_000.0, 1.0), (1_700_000_100.0, 0.66)),
        updated_at=1_700_000_000.0 + i,
    )
    for j in range(4):
        state = state.with_observation(
            Observation(
                at=1_700_000_000.0 + 100 * j,
                status=429,
                header=3600.0,
                form="delta",
                recovered=18.0 + j,
                served=40,
                span=60.0,
            )
        )
    return state


# -- bulk fills, in each backend's own format --------------------------------------------------


def fill_json(path: str, states: List[HostState]) -> None:
    doc = {"v": 1, "hosts": {s.host: s.to_dict() for s in states}}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"), sort_keys=True)


def fill_sqlite(path: str, states: List[HostState]) -> None:
    open_store(f"sqlite://{path}").close()  # creates the schema
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT OR REPLACE INTO hosts (host, state, updated) VALUES (?, ?, ?)",
            [(s.host, s.to_json(), s.updated_at) for s in states],
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def fill_store(spec: str, states: List[HostState]) -> None:
    store = open_store(spec)
    try:
        for state in states:
            store.set(state.host, state)
    finally:
        store.close()


def fill_redis(spec: str, states: List[HostState]) -> None:
    store: Any = open_store(spec)
    try:
        pipe = store.client.pipeline(transaction=False)
        for i, state in enumerate(states):
            pipe.set(store.prefix + state.host, state.to_json(), ex=store.ttl)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
    finally:
        store.close()


# -- a Redis server, if there is one or one can be started ------------------------------------


class LocalRedis:
    """A throw-away redis-server on a free port of 127.0.0.1, stopped by its process handle."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)  # the server is starting: wait for it, bounded above
        self.stop()
        raise RuntimeError("redis-server did not answer PING within 10 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_url() -> Tuple[Optional[str], Optional[LocalRedis], str]:
    """A server URL (from the environment, or a server started here) and a note."""
    try:
        import redis  # noqa: F401
    except ImportError:
        return None, None, "redis skipped: pip install requests-retryafter[redis]"
    url = os.environ.get(REDIS_URL_VAR)
    if url:
        return url, None, f"redis: {REDIS_URL_VAR}"
    if shutil.which("redis-server"):
        local = LocalRedis()
        return local.url, local, "redis: a redis-server started on a free port"
    return None, None, f"redis skipped: set {REDIS_URL_VAR} or install redis-server"


# -- measuring --------------------------------------------------------------------------------


def per_call(fn: Callable[[], Any], n: int, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean time of one call of ``fn``, in seconds."""
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        results.append((time.perf_counter() - start) / n)
    return statistics.median(results)


def time_open(spec: str, rounds: int = 5) -> float:
    """Best time to open the store at ``spec`` and get one host, in seconds."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        store = open_store(spec)
        state = store.get(PROBE)
        elapsed = time.perf_counter() - start
        store.close()
        assert state is not None, f"{spec}: {PROBE} missing"
        best = min(best, elapsed)
    return best


@dataclass
class Row:
    backend: str
    hosts: int
    open_get_s: Optional[float]
    get_us: float
    get_ratio: float
    update_us: float
    update_ratio: float
    small_update_us: float
    open_target: str


def bump(current: Optional[HostState]) -> HostState:
    assert current is not None
    return current.replace(updated_at=current.updated_at + 1)


def time_update(spec: str, host: str, updates: int) -> float:
    store = open_store(spec)
    try:
        store.get(host)
        return per_call(lambda: store.update(host, bump), updates, rounds=3)
    finally:
        store.close()


def measure(
    name: str,
    specs: Tuple[str, str],
    hosts: int,
    gets: int,
    updates: int,
    memory: Tuple[float, float],
) -> Row:
    spec, small_spec = specs
    open_s = time_open(spec)
    store = open_store(spec)
    try:
        store.get(PROBE)
        get_s = per_call(lambda: store.get(PROBE), gets)
    finally:
        store.close()
    update_s = time_update(spec, PROBE, updates)
    small_update_s = time_update(small_spec, "h0.example.org", 100)
    target = ""
    if name in TARGETED:
        target = "PASS" if open_s < OPEN_TARGET_S else "FAIL"
    return Row(
        backend=name,
        hosts=hosts,
        open_get_s=round(open_s, 4),
        get_us=round(get_s * 1e6, 2),
        get_ratio=round(get_s / memory[0], 1),
        update_us=round(update_s * 1e6, 1),
        update_ratio=round(update_s / memory[1], 1),
        small_update_us=round(small_update_s * 1e6, 1),
        open_target=target,
    )


def measure_memory(states: List[HostState], gets: int) -> Tuple[Row, Tuple[float, float]]:
    store = MemoryStore()
    for state in states:
        store.set(state.host, state)
    get_s = per_call(lambda: store.get(PROBE), gets)
    update_s = per_call(lambda: store.update(PROBE, bump), gets // 10)
    us = round(update_s * 1e6, 1)
    row = Row("memory", len(states), None, round(get_s * 1e6, 2), 1.0, us, 1.0, us, "")
    return row, (get_s, update_s)


def backends(
    workdir: str, states: List[HostState], small: int
) -> Iterator[Tuple[str, Tuple[str, str], int]]:
    """Yield ``(name, (spec, small spec), updates to time)`` for each file backend, its stores
    filled with ``states`` and with the first ``small`` of them."""
    for size, sub in ((len(states), "big"), (small, "small")):
        os.makedirs(f"{workdir}/{sub}")
        fill_json(f"{workdir}/{sub}/hosts.json", states[:size])
        fill_sqlite(f"{workdir}/{sub}/hosts.db", states[:size])
        fill_store(f"shelve://{workdir}/{sub}/hosts", states[:size])
    for name, file, updates in (
        ("json", "hosts.json", 5),  # each update rewrites the whole file
        ("sqlite", "hosts.db", 500),
        ("shelve", "hosts", 500),
    ):
        yield name, (f"{name}://{workdir}/big/{file}", f"{name}://{workdir}/small/{file}"), updates


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000, help="hosts per store (10000)")
    parser.add_argument("--gets", type=int, default=20_000, help="get() calls per round")
    parser.add_argument("--small", type=int, default=100, help="hosts in the small store (100)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.hosts <= int(PROBE[1:].split(".")[0]):
        parser.error(f"--hosts must be more than {PROBE[1:].split('.')[0]}")

    states = [make_state(i) for i in range(args.hosts)]
    memory_row, memory = measure_memory(states, args.gets)
    rows = [memory_row]
    notes: List[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as workdir:
        for name, specs, updates in backends(workdir, states, args.small):
            print(f"measuring {name} ...", file=sys.stderr)
            rows.append(measure(name, specs, args.hosts, args.gets, updates, memory))
    url, local, note = redis_url()
    notes.append(note)
    if url is not None:
        prefix = f"bench-stores:{uuid.uuid4().hex}:"
        sep = "&" if "?" in url else "?"
        spec, small_spec = f"{url}{sep}prefix={prefix}", f"{url}{sep}prefix={prefix}small:"
        try:
            print("measuring redis ...", file=sys.stderr)
            fill_redis(spec, states)
            fill_redis(small_spec, states[: args.small])
            rows.append(
                measure("redis", (spec, small_spec), args.hosts, args.gets // 10, 200, memory)
            )
        finally:
            cleanup: Any = open_store(spec)
            keys = list(cleanup.client.scan_iter(match=prefix + "*", count=1000))
            for i in range(0, len(keys), 1000):
                cleanup.client.delete(*keys[i : i + 1000])
            cleanup.close()
            if local is not None:
                local.stop()

    print(f"\n{args.hosts} hosts per store; Python {platform.python_version()}\n")
    print(
        "| backend | open+get s | get µs | get x memory | update µs | update x memory "
        f"| update µs ({args.small} hosts) | open < 0.5 s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        opened = "-" if row.open_get_s is None else f"{row.open_get_s:.3f}"
        print(
            f"| {row.backend} | {opened} | {row.get_us:.2f} | {row.get_ratio:.1f} "
            f"| {row.update_us:.1f} | {row.update_ratio:.1f} | {row.small_update_us:.1f} "
            f"| {row.open_target} |"
        )
    for note in notes:
        print(f"\n{note}")
    if args.json:
        document = {
            "benchmark": "bench_stores",
            "hosts": args.hosts,
            "python": platform.python_version(),
            "rows": [asdict(row) for row in rows],
            "notes": notes,
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
