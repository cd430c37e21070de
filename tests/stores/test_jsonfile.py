"""JsonFileStore: the contract, the file format, cached reads, damage and errors."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any, List

import filelock
import pytest

from requests_retryafter.errors import StoreError
from requests_retryafter.state import HostState
from requests_retryafter.stores.jsonfile import JsonFileStore

from .contract import StoreContract, add_token, dump_dir, full_state, tokens_of


def write_doc(path: Path, doc: Any) -> None:
    """Replace the file the way a writer does (new inode), with ``doc`` as JSON."""
    tmp = path.with_name(path.name + ".test-tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def backups(path: Path) -> List[Path]:
    return sorted(path.parent.glob(path.name + ".corrupt-*"))


class TestJsonFileStore(StoreContract):
    scheme = "json"

    def location(self, tmp_path: Path, request: pytest.FixtureRequest) -> Path:
        return tmp_path / "state" / "hosts.json"

    def make_store(self, location: Path) -> JsonFileStore:
        return JsonFileStore(str(location))

    def put_raw(self, store: Any, location: Path, host: str, text: str) -> None:
        doc: Any = json.loads(location.read_text()) if location.exists() else {"v": 1, "hosts": {}}
        try:
            doc["hosts"][host] = json.loads(text)
        except ValueError:
            doc["hosts"][host] = text  # not JSON: stored as a string, which is not an object
        write_doc(location, doc)

    def raw_dump(self, store: Any, location: Path) -> bytes:
        return dump_dir(location.parent)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "hosts.json"


def test_file_layout_mode_and_lock(path: Path) -> None:
    with JsonFileStore(str(path)) as store:
        state = full_state("a.example")
        store.set("a.example", state)
    doc = json.loads(path.read_text())
    assert doc == {"v": 1, "hosts": {"a.example": state.to_dict()}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["hosts.json", "hosts.json.lock"]


def test_file_is_canonical_json_after_mixed_writers(path: Path) -> None:
    # Writes re-encode only the host they change: check the result against a full encoding.
    a, b = JsonFileStore(str(path)), JsonFileStore(str(path))
    for i in range(5):
        a.set(f"a{i}.example", full_state(f"a{i}.example", i))
    b.update("a1.example", add_token("a1.example", "b"))
    a.update("a2.example", add_token("a2.example", "a"))
    a.update("a2.example", add_token("a2.example", "again"))
    a.delete("a3.example")
    b.set("z.example", HostState(host="z.example"))
    a.set("b.example", HostState(host="b.example"))
    data = path.read_bytes()
    doc = json.loads(data)
    assert data == json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    assert sorted(doc["hosts"]) == [
        "a0.example",
        "a1.example",
        "a2.example",
        "a4.example",
        "b.example",
        "z.example",
    ]
    assert {"a", "again"} <= tokens_of(HostState.from_dict(doc["hosts"]["a2.example"]))


def test_relative_path_is_fixed_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = JsonFileStore("rel/hosts.json")
    monkeypatch.chdir("/")
    store.set("a.example", HostState(host="a.example"))
    assert (tmp_path / "rel" / "hosts.json").exists()
    assert repr(store) == f"JsonFileStore({str(tmp_path / 'rel' / 'hosts.json')!r})"


def test_get_reads_the_file_only_when_it_changed(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonFileStore(str(path))
    store.set("a.example", HostState(host="a.example", evidence="1"))
    reads = []
    real_read = store._read

    def counting_read() -> Any:
        reads.append(1)
        return real_read()

    monkeypatch.setattr(store, "_read", counting_read)
    for _ in range(100):
        assert store.get("a.example") == HostState(host="a.example", evidence="1")
        assert store.get("b.example") is None
    assert reads == []

    other = JsonFileStore(str(path))
    other.set("b.example", HostState(host="b.example"))
    assert store.get("b.example") == HostState(host="b.example")
    assert store.get("a.example") == HostState(host="a.example", evidence="1")
    assert len(reads) == 1


def test_two_instances_interleaving_updates_lose_nothing(path: Path) -> None:
    a, b = JsonFileStore(str(path)), JsonFileStore(str(path))
    for i in range(20):
        a.update("shared.example", add_token("shared.example", f"a{i}"))
        b.update("shared.example", add_token("shared.example", f"b{i}"))
        a.set(f"a{i}.example", HostState(host=f"a{i}.example"))
        b.set(f"b{i}.example", HostState(host=f"b{i}.example"))
    expected = {f"{w}{i}" for w in "ab" for i in range(20)}
    assert tokens_of(a.get("shared.example")) == expected
    assert tokens_of(b.get("shared.example")) == expected
    assert len(dict(JsonFileStore(str(path)).items())) == 41


def test_delete_of_a_missing_host_does_not_write(path: Path) -> None:
    store = JsonFileStore(str(path))
    store.delete("nothing.example")
    assert not path.exists()


GOOD = {"v": 1, "hosts": {"a.example": HostState(host="a.example").to_dict()}}
DAMAGE = {
    "truncated": json.dumps(GOOD).encode()[:-7],
    "not JSON": b"\x00\xffnot json at all",
    "not UTF-8": b'{"v": 1, "hosts": {"\xff": 1}}',
    "a list": b"[1, 2, 3]",
    "schema version 2": json.dumps({"v": 2, "hosts": {}}).encode(),
    "no schema version": json.dumps({"hosts": {}}).encode(),
    "hosts not an object": json.dumps({"v": 1, "hosts": []}).encode(),
}


@pytest.mark.parametrize("content", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_file_is_moved_aside_and_the_store_starts_fresh(
    path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="requests_retryafter.stores.jsonfile"):
        store = JsonFileStore(str(path))
    assert store.get("a.example") is None
    assert list(store.items()) == []
    [backup] = backups(path)
    assert backup.read_bytes() == content
    assert "damaged" in caplog.text
    assert str(backup) in caplog.text
    store.set("b.example", HostState(host="b.example"))
    assert JsonFileStore(str(path)).get("b.example") == HostState(host="b.example")
    assert json.loads(path.read_text())["v"] == 1


def test_damage_after_open_is_repaired_on_the_next_read(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonFileStore(str(path))
    store.set("a.example", HostState(host="a.example"))
    path.write_bytes(b'{"v": 1, "hosts": {"a.exa')  # in place, as a careless tool would
    with caplog.at_level(logging.WARNING):
        assert store.get("a.example") is None
    assert len(backups(path)) == 1
    assert "damaged" in caplog.text
    store.update("a.example", add_token("a.example", "x"))
    assert tokens_of(JsonFileStore(str(path)).get("a.example")) == {"x"}


def test_two_damages_in_one_second_keep_both_backups(path: Path) -> None:
    path.write_bytes(b"first")
    JsonFileStore(str(path))
    path.write_bytes(b"second")
    JsonFileStore(str(path))
    assert sorted(p.read_bytes() for p in backups(path)) == [b"first", b"second"]


def test_empty_file_is_a_fresh_store_without_backup(path: Path) -> None:
    path.write_bytes(b"")
    store = JsonFileStore(str(path))
    assert list(store.items()) == []
    assert backups(path) == []
    store.set("a.example", HostState(host="a.example"))
    assert store.get("a.example") == HostState(host="a.example")


def test_bad_entries_are_dropped_and_the_rest_kept(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    future = HostState(host="future.example").to_dict()
    future["v"] = 2
    write_doc(
        path,
        {
            "v": 1,
            "hosts": {
                "good.example": HostState(host="good.example").to_dict(),
                "future.example": future,
                "string.example": "not an object",
                "broken.example": {"v": 1, "host": "broken.example", "observations": [7]},
            },
        },
    )
    with caplog.at_level(logging.WARNING):
        store = JsonFileStore(str(path))
        assert dict(store.items()) == {"good.example": HostState(host="good.example")}
    for host in ("future.example", "string.example", "broken.example"):
        assert host in caplog.text
    assert backups(path) == []
    store.set("new.example", HostState(host="new.example"))
    assert sorted(json.loads(path.read_text())["hosts"]) == ["good.example", "new.example"]


def test_stale_temporary_files_are_removed_on_open(path: Path) -> None:
    JsonFileStore(str(path)).set("a.example", HostState(host="a.example"))
    stale = path.parent / ".hosts.json.abc123.tmp"
    stale.write_bytes(b'{"v": 1, "ho')  # what a writer killed mid-write leaves
    other = path.parent / ".other.json.abc123.tmp"
    other.write_bytes(b"")
    assert JsonFileStore(str(path)).get("a.example") == HostState(host="a.example")
    assert not stale.exists()
    assert other.exists()  # another store's file is left alone


def test_unusable_directory_raises_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot create directory") as info:
        JsonFileStore(str(tmp_path / "file" / "hosts.json"))
    assert isinstance(info.value.__cause__, OSError)


def test_unreadable_file_raises_store_error(path: Path) -> None:
    path.mkdir()  # a directory where the file should be
    with pytest.raises(StoreError, match="cannot read") as info:
        JsonFileStore(str(path))
    assert isinstance(info.value.__cause__, OSError)


def test_failed_write_raises_store_error_and_changes_nothing(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonFileStore(str(path))
    store.set("a.example", HostState(host="a.example", evidence="old"))

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StoreError, match="No space left") as info:
        store.set("a.example", HostState(host="a.example", evidence="new"))
    assert isinstance(info.value.__cause__, OSError)
    monkeypatch.undo()
    assert store.get("a.example") == HostState(host="a.example", evidence="old")
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_lock_held_elsewhere_raises_store_error_after_the_timeout(path: Path) -> None:
    store = JsonFileStore(str(path), lock_timeout=0.05)
    other = filelock.FileLock(str(path) + ".lock")
    other.acquire(timeout=1)
    try:
        with pytest.raises(StoreError, match="held by another process"):
            store.set("a.example", HostState(host="a.example"))
    finally:
        other.release()
    store.set("a.example", HostState(host="a.example"))


def test_closed_store_raises_store_error(path: Path) -> None:
    store = JsonFileStore(str(path))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("a.example")
