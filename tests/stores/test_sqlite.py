"""SqliteStore: the contract, the schema, caching, damage and errors."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from requests_retryafter.errors import StoreError
from requests_retryafter.state import HostState
from requests_retryafter.stores.sqlite import APPLICATION_ID, SqliteStore

from .contract import StoreContract, add_token, dump_dir, full_state, tokens_of


def backups(path: Path) -> List[Path]:
    """The backups of the database itself (not of its -wal and -shm files)."""
    pattern = re.compile(re.escape(path.name) + r"\.corrupt-\d{8}T\d{6}(-\d+)?")
    return sorted(p for p in path.parent.iterdir() if pattern.fullmatch(p.name))


def raw_connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None, timeout=5)


class TestSqliteStore(StoreContract):
    scheme = "sqlite"

    def location(self, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
        return tmp_path / "state" / "hosts.db"

    def make_store(self, location: Path) -> SqliteStore:
        return SqliteStore(str(location))

    def put_raw(self, store: Any, location: Path, host: str, text: str) -> None:
        conn = raw_connect(location)
        try:
            conn.execute("INSERT OR REPLACE INTO hosts VALUES (?, ?, 0)", (host, text))
        finally:
            conn.close()

    def raw_entries(self, store: Any, location: Path) -> str:
        conn = raw_connect(location)
        try:
            rows = conn.execute("SELECT state FROM hosts").fetchall()
        finally:
            conn.close()
        return "\n".join(json.dumps(json.loads(r[0]), sort_keys=True) for r in rows)

    def raw_dump(self, store: Any, location: Path) -> bytes:
        return dump_dir(location.parent)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "hosts.db"


@pytest.fixture
def opened() -> Iterator[Callable[..., SqliteStore]]:
    """Open stores that are closed after the test (Python 3.13 warns of unclosed connections)."""
    stores: List[SqliteStore] = []

    def open_(path: Path, **kwargs: Any) -> SqliteStore:
        store = SqliteStore(str(path), **kwargs)
        stores.append(store)
        return store

    yield open_
    for store in stores:
        store.close()


def test_schema_wal_mode_and_file_mode(path: Path) -> None:
    with SqliteStore(str(path)) as store:
        store.set("a.example", full_state("a.example"))
        conn = store._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2_000
    conn = raw_connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        columns = [(r[1], r[2], r[5]) for r in conn.execute("PRAGMA table_info(hosts)")]
        assert columns == [("host", "TEXT", 1), ("state", "TEXT", 0), ("updated", "REAL", 0)]
        [(host, text, updated)] = conn.execute("SELECT host, state, updated FROM hosts")
    finally:
        conn.close()
    assert host == "a.example"
    assert HostState.from_json(text) == full_state("a.example")
    assert updated > 1_700_000_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_cached_get_sees_commits_of_other_connections(path: Path, opened: Any) -> None:
    a, b = opened(path), opened(path)
    a.set("x.example", HostState(host="x.example", evidence="1"))
    assert b.get("x.example") == HostState(host="x.example", evidence="1")
    assert b.get("y.example") is None
    a.set("x.example", HostState(host="x.example", evidence="2"))
    a.set("y.example", HostState(host="y.example"))
    assert b.get("x.example") == HostState(host="x.example", evidence="2")
    assert b.get("y.example") == HostState(host="y.example")
    a.delete("x.example")
    assert b.get("x.example") is None
    b.update("y.example", add_token("y.example", "b"))
    assert tokens_of(a.get("y.example")) == {"b"}


def test_two_instances_interleaving_updates_lose_nothing(path: Path, opened: Any) -> None:
    a, b = opened(path), opened(path)
    for i in range(20):
        a.update("shared.example", add_token("shared.example", f"a{i}"))
        b.update("shared.example", add_token("shared.example", f"b{i}"))
    assert tokens_of(a.get("shared.example")) == {f"{w}{i}" for w in "ab" for i in range(20)}


def test_a_forked_child_opens_its_own_connection(path: Path, opened: Any) -> None:
    store = opened(path)
    store.set("a.example", HostState(host="a.example"))
    parent_conn = store._conn
    store._pid = -1  # as if this process were a child forked after the store was opened
    store.update("a.example", add_token("a.example", "child"))
    assert store._conn is not parent_conn
    parent_conn.close()
    assert tokens_of(opened(path).get("a.example")) == {"child"}


def make_valid_db(path: Path, hosts: int = 300) -> None:
    with SqliteStore(str(path)) as store:
        for i in range(hosts):
            store.set(f"h{i}.example", full_state(f"h{i}.example", 5))
    conn = raw_connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def damage_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def damage_truncated(path: Path) -> None:
    make_valid_db(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def damage_pages(path: Path) -> None:
    make_valid_db(path)
    data = bytearray(path.read_bytes())
    page = 4096
    data[page * 2 : page * 4] = os.urandom(page * 2)  # overwrite b-tree pages, keep the header
    path.write_bytes(bytes(data))


def damage_version(path: Path) -> None:
    make_valid_db(path, hosts=1)
    conn = raw_connect(path)
    conn.execute("PRAGMA user_version = 2")
    conn.close()


def damage_columns(path: Path) -> None:
    conn = raw_connect(path)
    conn.execute("CREATE TABLE hosts (host TEXT PRIMARY KEY, blob BLOB)")
    conn.execute("PRAGMA user_version = 1")
    conn.close()


def damage_old_pages(path: Path) -> None:
    """Damaged pages in a store written before the application id was set."""
    make_valid_db(path)
    conn = raw_connect(path)
    conn.execute("PRAGMA application_id = 0")
    conn.close()
    damage_pages(path)


DAMAGE = {
    "truncated": damage_truncated,
    "damaged pages": damage_pages,
    "damaged pages, no application id": damage_old_pages,
}
FOREIGN = {
    "garbage bytes": damage_garbage,
    "wrong columns": damage_columns,
    "schema version 2": damage_version,
}


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("make", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_file_that_is_not_this_stores_is_refused_and_left_alone(
    path: Path, make: Any, read_only: bool
) -> None:
    make(path)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.parent.iterdir()}
    with pytest.raises(StoreError, match=r"not a requests-retryafter store|newer version") as info:
        SqliteStore(str(path), read_only=read_only)
    assert str(path) in str(info.value)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.parent.iterdir()}
    for name in (path.name + ".lock", path.name + "-shm", path.name + "-wal"):
        after.pop(name, None)
        before.pop(name, None)
    assert after == before
    assert backups(path) == []


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_database_is_moved_aside_and_the_store_starts_fresh(
    path: Path, damage: Any, caplog: pytest.LogCaptureFixture, opened: Any
) -> None:
    damage(path)
    content = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="requests_retryafter.stores.sqlite"):
        store = opened(path)
    assert "damaged" in caplog.text
    [backup] = backups(path)
    assert backup.read_bytes() == content
    assert store.get("h1.example") is None
    assert list(store.items()) == []
    store.set("b.example", HostState(host="b.example"))
    store.close()
    conn = raw_connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    assert opened(path).get("b.example") == HostState(host="b.example")


def test_stale_wal_moves_aside_with_its_database(path: Path, opened: Any) -> None:
    damage_pages(path)
    Path(str(path) + "-wal").write_bytes(b"stale wal")
    store = opened(path)
    [backup] = backups(path)
    assert Path(str(backup) + "-wal").read_bytes() == b"stale wal"
    store.set("a.example", HostState(host="a.example"))
    assert store.get("a.example") == HostState(host="a.example")


def test_empty_file_is_a_fresh_store_without_backup(path: Path, opened: Any) -> None:
    path.write_bytes(b"")
    store = opened(path)
    store.set("a.example", HostState(host="a.example"))
    assert backups(path) == []


def test_someone_elses_database_is_refused_and_left_alone(path: Path) -> None:
    conn = raw_connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a requests-retryafter store"):
        SqliteStore(str(path))
    assert path.read_bytes() == before
    assert backups(path) == []


def test_busy_database_raises_store_error_after_the_timeout(path: Path, opened: Any) -> None:
    store = opened(path, timeout=0.05)
    store.set("a.example", HostState(host="a.example"))
    other = raw_connect(path)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="cannot write") as info:
            store.update("a.example", add_token("a.example", "x"))
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(StoreError):
            store.set("b.example", HostState(host="b.example"))
        assert store.get("a.example") == HostState(host="a.example")  # WAL: reads go on
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.update("a.example", add_token("a.example", "x"))


def test_unusable_directory_raises_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="Not a directory \\(ENOTDIR\\)"):
        SqliteStore(str(tmp_path / "file" / "hosts.db"))


def test_closed_store_raises_store_error(path: Path) -> None:
    store = SqliteStore(str(path))
    store.close()
    for call in (
        lambda: store.get("a.example"),
        lambda: store.set("a.example", HostState(host="a.example")),
        lambda: store.delete("a.example"),
        lambda: list(store.items()),
    ):
        with pytest.raises(StoreError, match="closed"):
            call()
