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


def test_a_second_opener_gets_a_clear_store_error(path: Path) -> None:
    first = ShelveStore(str(path))
    with pytest.raises(StoreError, match="in use by another process") as info:
        ShelveStore(str(path))
    assert "json://" in str(info.value)
    assert "sqlite://" in str(info.value)
    first.close()
    ShelveStore(str(path)).close()  # free again once closed


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


def damage_no_version(path: Path) -> None:
    make_db(path)
    with dbm.open(str(path), "w") as db:
        del db[META_KEY]


def damage_not_a_database(path: Path) -> None:
    path.write_text("host,category\napi.example.org,truthful\n")


DAMAGE: Dict[str, Callable[[Path], None]] = {
    "garbage": damage_garbage,
    "truncated": damage_truncated,
    "schema version 2": damage_version,
    "no schema version": damage_no_version,
    "not a database": damage_not_a_database,
}


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
    with caplog.at_level(logging.WARNING):
        store = ShelveStore(str(path))
    assert "dbm.sqlite3" in caplog.text
    assert len(backups(path)) == 1
    store.set("a.example", HostState(host="a.example"))
    assert store.get("a.example") == HostState(host="a.example")
    store.close()
    assert dbm.whichdb(str(path)) != "dbm.sqlite3"
