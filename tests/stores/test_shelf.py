"""ShelveStore: the contract, single-process locking, JSON values, damage."""

from __future__ import annotations

import dbm
import json
import logging
import re
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from requests_retryafter.errors import StoreError
from requests_retryafter.state import HostState
from requests_retryafter.stores.shelf import ShelveStore

from .contract import StoreContract, dump_dir, full_state

META_KEY = b"\x00requests_retryafter_schema"


class TestShelveStore(StoreContract):
    scheme = "shelve"
    expected_shared = False

    def location(self, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
        return tmp_path / "state" / "hosts"

    def make_store(self, location: Path) -> ShelveStore:
        return ShelveStore(str(location))

    def put_raw(self, store: Any, location: Path, host: str, text: str) -> None:
        # The store is single-process and open, so plant the value through its handle.
        with store._lock:
            store._db[host.encode()] = text.encode()

    def raw_entries(self, store: Any, location: Path) -> str:
        with store._lock:
            values = [store._db[k] for k in store._db.keys() if k != META_KEY]  # noqa: SIM118
        return "\n".join(json.dumps(json.loads(v), sort_keys=True) for v in values)

    def raw_dump(self, store: Any, location: Path) -> bytes:
        return dump_dir(location.parent)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "hosts"


def db_file_set(path: Path) -> List[Path]:
    """The files the dbm implementation keeps for ``path`` (``hosts`` or ``hosts.EXT``)."""
    names = re.compile(re.escape(path.name) + r"(\.(db|dat|dir|bak|pag))?")
    return sorted(p for p in path.parent.iterdir() if names.fullmatch(p.name))


def backups(path: Path) -> List[Path]:
    return sorted(path.parent.glob(path.name + ".corrupt-*"))


def test_a_second_store_in_this_process_shares_the_handle(path: Path) -> None:
    first = ShelveStore(str(path))
    second = ShelveStore(str(path))  # a report beside a running job, say
    reader = ShelveStore(str(path), read_only=True)
    first.set("a.example", HostState(host="a.example", evidence="1"))
    assert second.get("a.example") == HostState(host="a.example", evidence="1")
    second.update("a.example", lambda s: HostState(host="a.example", evidence="2"))
    assert first.get("a.example") == HostState(host="a.example", evidence="2")
    assert dict(reader.items()) == {"a.example": HostState(host="a.example", evidence="2")}
    with pytest.raises(StoreError, match="read-only"):
        reader.set("b.example", HostState(host="b.example"))
    first.close()
    reader.close()
    assert second.get("a.example") == HostState(host="a.example", evidence="2")  # still open
    second.close()
    with pytest.raises(StoreError, match="closed"):
        first.get("a.example")
    ShelveStore(str(path)).close()  # free again once all are closed


def test_opening_for_writing_beside_a_read_only_store_says_this_process_holds_it(
    path: Path,
) -> None:
    ShelveStore(str(path)).close()
    reader = ShelveStore(str(path), read_only=True)
    try:
        with pytest.raises(StoreError, match="this process already has it open read-only"):
            ShelveStore(str(path))
    finally:
        reader.close()


def test_values_are_json_text_never_pickles(path: Path) -> None:
    with ShelveStore(str(path)) as store:
        store.set("a.example", full_state("a.example"))
        store.set("b.example", HostState(host="b.example"))
    db: Any
    with dbm.open(str(path), "r") as db:
        values: Dict[bytes, bytes] = {k: db[k] for k in db.keys()}  # noqa: SIM118 - gdbm
    assert values.pop(META_KEY) == b"1"
    assert set(values) == {b"a.example", b"b.example"}
    for raw in values.values():
        assert not raw.startswith(b"\x80")  # a pickle starts with the PROTO opcode
        assert json.loads(raw)["v"] == 1
    assert HostState.from_json(values[b"a.example"].decode()) == full_state("a.example")


def make_db(path: Path) -> None:
    with ShelveStore(str(path)) as store:
        for i in range(50):
            store.set(f"h{i}.example", full_state(f"h{i}.example", 3))


def damage_garbage(path: Path) -> None:
    make_db(path)
    for f in db_file_set(path):
        f.write_bytes(b"\x00\xff garbage \x13\x37" * 64)


def damage_truncated(path: Path) -> None:
    make_db(path)
    for f in db_file_set(path):
        data = f.read_bytes()
        cut = len(data) // 3
        while cut > 1 and data[cut - 1 : cut] in (b"\n", b"\r"):  # cut inside a record
            cut -= 1
        f.write_bytes(data[:cut])


def damage_version(path: Path) -> None:
    make_db(path)
    with dbm.open(str(path), "w") as db:
        db[META_KEY] = b"2"


def damage_marker(path: Path) -> None:
    make_db(path)
    with dbm.open(str(path), "w") as db:
        db[META_KEY] = b"garbage"


def damage_no_version(path: Path) -> None:
    make_db(path)
    with dbm.open(str(path), "w") as db:
        del db[META_KEY]


def damage_not_a_database(path: Path) -> None:
    path.write_text("host,category\napi.example.org,truthful\n")


DAMAGE: Dict[str, Callable[[Path], None]] = {
    "truncated": damage_truncated,
    "damaged schema marker": damage_marker,
}
# Not recognisably this store's (or a newer version's): refused, nothing changed.
FOREIGN: Dict[str, Callable[[Path], None]] = {
    "garbage": damage_garbage,
    "no schema marker": damage_no_version,
    "not a database": damage_not_a_database,
    "schema version 2": damage_version,
}


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("make", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_database_that_is_not_this_stores_is_refused_and_left_alone(
    path: Path, make: Callable[[Path], None], read_only: bool
) -> None:
    make(path)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.parent.iterdir()}
    with pytest.raises(StoreError, match=r"not a requests-retryafter store|newer version") as info:
        ShelveStore(str(path), read_only=read_only)
    assert str(path) in str(info.value)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in path.parent.iterdir()}
    after.pop(path.name + ".lock", None)
    before.pop(path.name + ".lock", None)
    assert after == before
    assert backups(path) == []


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_database_is_moved_aside_and_the_store_starts_fresh(
    path: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    damage(path)
    before = {p.name: p.read_bytes() for p in db_file_set(path)}
    with caplog.at_level(logging.WARNING, logger="requests_retryafter.stores.shelf"):
        store = ShelveStore(str(path))
    assert "damaged" in caplog.text
    moved = backups(path)
    assert moved
    backup_base = re.sub(r"\.(dat|dir|bak|db|pag)$", "", moved[0].name)
    assert {p.name.replace(backup_base, path.name): p.read_bytes() for p in moved} == before
    assert store.get("h1.example") is None
    assert list(store.items()) == []
    store.set("b.example", HostState(host="b.example"))
    store.close()
    with ShelveStore(str(path)) as again:
        assert dict(again.items()) == {"b.example": HostState(host="b.example")}


def test_closed_store_raises_store_error(path: Path) -> None:
    store = ShelveStore(str(path))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("a.example")


def test_a_python_313_dbm_sqlite3_file_is_not_used(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Python 3.13's default dbm cannot be used from several threads; this store never makes
    # one, and moves one it finds aside rather than failing later.
    sqlite3_dbm: Any = pytest.importorskip("dbm.sqlite3")
    with sqlite3_dbm.open(str(path), "c") as db:
        db[b"a.example"] = b"{}"
    with pytest.raises(StoreError, match=r"dbm\.sqlite3"):
        ShelveStore(str(path))
    assert backups(path) == []
