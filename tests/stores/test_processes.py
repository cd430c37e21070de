"""Several processes sharing one store, and a writer killed with SIGKILL mid-write.

Children are started with the 'spawn' method (a fresh interpreter: nothing inherited from
pytest's process but the arguments) and run the functions in ``_workers``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any, List

import pytest

from requests_retryafter.state import MAX_OBSERVATIONS, HostState
from requests_retryafter.stores import open_store

from . import _workers
from .conftest import with_query
from .contract import tokens_of

WORKERS = 4
UPDATES = 50
JOIN_TIMEOUT = 60.0  # seconds; generous, a run takes a few
KILL_ROUNDS = 5

ctx = multiprocessing.get_context("spawn")

SHARED_BACKENDS = [
    "json",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
]


def make_spec(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "json":
        return f"json://{tmp_path}/hosts.json"
    if backend == "sqlite":
        return f"sqlite://{tmp_path}/hosts.db"
    if backend == "shelve":
        return f"shelve://{tmp_path}/hosts"
    url = request.getfixturevalue("redis_url")
    return with_query(url, prefix=request.getfixturevalue("redis_prefix"))


def check_file_is_valid(backend: str, tmp_path: Path) -> None:
    if backend == "json":
        doc = json.loads((tmp_path / "hosts.json").read_text())
        assert doc["v"] == 1
        for state in doc["hosts"].values():
            HostState.from_dict(state)
        assert not list(tmp_path.glob("*.corrupt-*"))
    elif backend == "sqlite":
        conn = sqlite3.connect(str(tmp_path / "hosts.db"))
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
        assert not list(tmp_path.glob("*.corrupt-*"))


@pytest.mark.parametrize("backend", SHARED_BACKENDS)
def test_processes_updating_one_store_lose_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spec = make_spec(backend, tmp_path, request)
    start = ctx.Barrier(WORKERS)
    procs = [
        ctx.Process(target=_workers.update_many, args=(spec, w, UPDATES, start))
        for w in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(JOIN_TIMEOUT)
    assert [p.exitcode for p in procs] == [0] * WORKERS

    store = open_store(spec)
    try:
        shared = store.get(_workers.SHARED_HOST)
        assert tokens_of(shared) == {
            _workers.token(w, i) for w in range(WORKERS) for i in range(UPDATES)
        }
        assert shared is not None
        assert len(shared.observations) == MAX_OBSERVATIONS
        hosts = dict(store.items())
        for w in range(WORKERS):
            for i in range(UPDATES):
                assert hosts[_workers.own_host(w, i)].evidence == str(i)
        assert len(hosts) == WORKERS * UPDATES + 1
    finally:
        store.close()
    check_file_is_valid(backend, tmp_path)


def run_writer_and_kill_it(spec: str, first: int) -> List[int]:
    """Start a writer, let it write for a random 20-120 ms of real time, SIGKILL it and return
    the numbers of the writes it reported as done."""
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_workers.write_until_killed, args=(spec, sender, first))
    proc.start()
    sender.close()
    reported: List[int] = []
    try:
        assert receiver.poll(JOIN_TIMEOUT), "the writer did not start writing"
        reported.append(receiver.recv())
        # A real-time wait is the point here: the kill must land at an arbitrary moment of
        # the writer's loop (a kill right after a report would always hit the same spot).
        # The wait is spent draining reports from the pipe, not sleeping.
        deadline = time.monotonic() + random.uniform(0.02, 0.12)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if receiver.poll(left):
                reported.append(receiver.recv())
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
        proc.join(JOIN_TIMEOUT)
    assert proc.exitcode == -signal.SIGKILL
    while True:  # writes reported just before the kill are still in the pipe
        try:
            reported.append(receiver.recv())
        except EOFError:
            break
    return reported


@pytest.mark.parametrize("backend", ["json", "sqlite"])
def test_writer_killed_mid_write_loses_no_reported_update(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    spec = make_spec(backend, tmp_path, request)
    reported: List[int] = []
    for _round in range(KILL_ROUNDS):
        reported += run_writer_and_kill_it(spec, first=max(reported, default=-1) + 1)
        check_file_is_valid(backend, tmp_path)
        store = open_store(spec)
        try:
            assert {str(i) for i in reported} <= tokens_of(store.get(_workers.SHARED_HOST))
            hosts = dict(store.items())
            for i in reported:
                assert hosts[f"c{i}.example"].evidence.startswith("xxx")
        finally:
            store.close()
        if backend == "json":
            # A temporary file the killed writer left was removed when the store opened.
            assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert len(reported) >= KILL_ROUNDS


def test_a_second_process_cannot_open_a_shelve_store(tmp_path: Path) -> None:
    spec = f"shelve://{tmp_path}/hosts"
    store = open_store(spec)
    store.set("a.example", HostState(host="a.example"))
    queue: Any = ctx.Queue()
    try:
        proc = ctx.Process(target=_workers.try_open, args=(spec, queue))
        proc.start()
        outcome = queue.get(timeout=JOIN_TIMEOUT)
        proc.join(JOIN_TIMEOUT)
        assert outcome.startswith("StoreError: ")
        assert "in use by another process" in outcome
        assert "single-process" in outcome
    finally:
        store.close()
    proc = ctx.Process(target=_workers.try_open, args=(spec, queue))
    proc.start()
    assert queue.get(timeout=JOIN_TIMEOUT) == "opened"
    proc.join(JOIN_TIMEOUT)
