"""Functions run in child processes by the multi-process store tests (module level, so that
the 'spawn' start method can import them)."""

from __future__ import annotations

from typing import Any

from requests_retryafter.state import HostState
from requests_retryafter.stores import open_store
from requests_retryafter.stores.jsonfile import JsonFileStore

from .contract import add_token

SHARED_HOST = "shared.example"


def own_host(worker: int, i: int) -> str:
    return f"w{worker}-{i}.example"


def token(worker: int, i: int) -> str:
    return f"{worker}:{i}"


def update_many(spec: str, worker: int, n: int, start: Any) -> None:
    """Add ``n`` tokens (and observations) to the shared host and write ``n`` hosts of our
    own, after every worker is ready."""
    # What concurrent writers keep is tested here, not how long one waits for another: on a
    # loaded CI machine (two tox environments at once) a writer waited past the JSON store's
    # default 2 s for the lock file, and raised.
    if spec.startswith("json://"):
        store: Any = JsonFileStore(spec[len("json://") :], lock_timeout=30.0)
    else:
        store = open_store(spec)
    try:
        start.wait()
        for i in range(n):
            store.update(SHARED_HOST, add_token(SHARED_HOST, token(worker, i)))
            store.set(own_host(worker, i), HostState(host=own_host(worker, i), evidence=str(i)))
    finally:
        store.close()


def write_until_killed(spec: str, conn: Any, first: int) -> None:
    """Write host after host (from number ``first``), reporting each write only once
    ``update`` has returned; the parent kills this process with SIGKILL at some point."""
    store = open_store(spec)
    padding = "x" * 2000  # makes each write (and so the window for the kill) longer
    i = first
    while True:
        host = f"c{i}.example"
        store.set(host, HostState(host=host, evidence=padding))
        store.update(SHARED_HOST, add_token(SHARED_HOST, str(i)))
        conn.send(i)
        i += 1


def try_open(spec: str, queue: Any) -> None:
    """Report what opening the store does in this process: "opened" or the error."""
    try:
        store = open_store(spec)
    except Exception as exc:
        queue.put(f"{type(exc).__name__}: {exc}")
    else:
        store.close()
        queue.put("opened")
