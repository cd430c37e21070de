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
from requests_retryafter.stores.jsonfile import FORMAT, JsonFileStore

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
        except (ValueError, RecursionError):
            doc["hosts"][host] = text  # not JSON: stored as a string, which is not an object
        write_doc(location, doc)

    def raw_entries(self, store: Any, location: Path) -> str:
        hosts = json.loads(location.read_text())["hosts"]
        return "\n".join(json.dumps(e, sort_keys=True) for e in hosts.values())

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
    assert doc == {"format": FORMAT, "v": 1, "hosts": {"a.example": state.to_dict()}}
    assert path.read_bytes().startswith(b'{"format":"requests-retryafter",')
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


GOOD = {"format": FORMAT, "hosts": {"a.example": HostState(host="a.example").to_dict()}, "v": 1}
GOOD_TEXT = json.dumps(GOOD, separators=(",", ":"), sort_keys=True).encode()
OLD_TEXT = json.dumps({"hosts": GOOD["hosts"], "v": 1}, separators=(",", ":"), sort_keys=True)
# Files of this library's format that are damaged: moved aside.
DAMAGE = {
    "truncated": GOOD_TEXT[:-7],
    "truncated, pretty-printed": json.dumps(GOOD, indent=2).encode()[:60],
    "truncated, written before the format key": OLD_TEXT.encode()[:-9],
    "format version garbage": json.dumps({"format": FORMAT, "v": "x", "hosts": {}}).encode(),
    "hosts not an object": json.dumps({"format": FORMAT, "v": 1, "hosts": []}).encode(),
    "nested too deeply": b'{"format":"requests-retryafter","hosts":' + b"[" * 100_000,
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
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "damaged" in record.getMessage()
    assert str(path) in record.getMessage()
    assert str(backup) in record.getMessage()
    store.set("b.example", HostState(host="b.example"))
    assert JsonFileStore(str(path)).get("b.example") == HostState(host="b.example")
    assert json.loads(path.read_text())["format"] == FORMAT


# Files that are not recognisably this library's store: refused, never changed.
FOREIGN = {
    "another app's config": json.dumps({"theme": "dark", "hosts": ["a", "b"]}).encode(),
    "a text file": b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n",
    "not UTF-8": b'{"v": 1, "hosts": {"\xff": 1}}',
    "a list": b"[1, 2, 3]",
    "the old layout with another key": json.dumps({"v": 1, "hosts": {}, "x": 1}).encode(),
    "the old layout, version 2": json.dumps({"v": 2, "hosts": {}}).encode(),
    "hosts that are not entries": json.dumps({"v": 1, "hosts": {"db": "10.0.0.1"}}).encode(),
    "another format": json.dumps({"format": "other-tool", "v": 1, "hosts": {}}).encode(),
    "truncated, someone else's": b'{"name": "my-app", "hosts": {"a": ',
    "nested too deeply, someone else's": b'{"a":' + b"[" * 100_000,
}


@pytest.mark.parametrize("content", FOREIGN.values(), ids=FOREIGN.keys())
@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_file_that_is_not_a_store_is_refused_and_left_alone(
    path: Path, content: bytes, read_only: bool, caplog: pytest.LogCaptureFixture
) -> None:
    path.write_bytes(content)
    os.chmod(path, 0o644)
    before = path.stat()
    with pytest.raises(StoreError, match="not a requests-retryafter store") as info:
        JsonFileStore(str(path), read_only=read_only)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_mode) == (
        before.st_ino,
        before.st_mtime_ns,
        before.st_mode,
    )
    assert backups(path) == []
    assert "moved" not in caplog.text


def test_a_file_written_before_the_format_key_is_read_and_upgraded(path: Path) -> None:
    path.write_text(OLD_TEXT)
    store = JsonFileStore(str(path))
    assert dict(store.items()) == {"a.example": HostState(host="a.example")}
    store.set("b.example", HostState(host="b.example"))
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT
    assert sorted(doc["hosts"]) == ["a.example", "b.example"]


def test_a_file_of_a_newer_format_version_is_refused_and_left_alone(path: Path) -> None:
    content = json.dumps({"format": FORMAT, "v": 2, "hosts": {}}).encode()
    path.write_bytes(content)
    with pytest.raises(StoreError, match="newer version"):
        JsonFileStore(str(path))
    assert path.read_bytes() == content
    assert backups(path) == []


def test_unknown_top_level_keys_are_kept_on_rewrite(path: Path) -> None:
    doc = dict(GOOD, written_by={"version": "9.0", "at": 1}, zzz=[1, 2])
    path.write_text(json.dumps(doc))
    store = JsonFileStore(str(path))
    store.set("b.example", HostState(host="b.example"))
    store.delete("a.example")
    after = json.loads(path.read_text())
    assert after["written_by"] == {"version": "9.0", "at": 1}
    assert after["zzz"] == [1, 2]
    assert sorted(after["hosts"]) == ["b.example"]
    data = path.read_bytes()
    assert data == json.dumps(after, separators=(",", ":"), sort_keys=True).encode()


def test_damage_after_open_is_repaired_on_the_next_read(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = JsonFileStore(str(path))
    store.set("a.example", HostState(host="a.example"))
    path.write_bytes(b'{"format":"requests-retryafter","hosts":{"a.exa')  # in place
    with caplog.at_level(logging.WARNING):
        assert store.get("a.example") is None
    assert len(backups(path)) == 1
    assert "damaged" in caplog.text
    store.update("a.example", add_token("a.example", "x"))
    assert tokens_of(JsonFileStore(str(path)).get("a.example")) == {"x"}


def test_two_damages_in_one_second_keep_both_backups(path: Path) -> None:
    first = b'{"format":"requests-retryafter","hosts":{"first'
    second = b'{"format":"requests-retryafter","hosts":{"second'
    path.write_bytes(first)
    JsonFileStore(str(path))
    path.write_bytes(second)
    JsonFileStore(str(path))
    assert sorted(p.read_bytes() for p in backups(path)) == [first, second]


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
            "format": FORMAT,
            "v": 1,
            "hosts": {
                "good.example": HostState(host="good.example").to_dict(),
                "future.example": future,
                "string.example": "not an object",
                "nameless.example": {"v": 1, "category": "absent"},
                "broken.example": {
                    "v": 1,
                    "host": "broken.example",
                    "category": "always_zero",
                    "observations": [7],
                },
            },
        },
    )
    with caplog.at_level(logging.INFO):
        store = JsonFileStore(str(path))
        # An entry with one malformed part keeps the rest of what was learned.
        assert dict(store.items()) == {
            "good.example": HostState(host="good.example"),
            "broken.example": HostState(host="broken.example", category="always_zero"),
        }
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for host in ("string.example", "nameless.example", "broken.example"):
        assert host in warned
    assert "observations[0]" in warned
    assert "future.example" not in warned  # a newer version's entry: INFO, and kept
    assert "future.example" in caplog.text
    assert backups(path) == []
    store.set("new.example", HostState(host="new.example"))
    hosts = json.loads(path.read_text())["hosts"]
    assert sorted(hosts) == ["broken.example", "future.example", "good.example", "new.example"]
    assert hosts["future.example"] == future
    assert hosts["broken.example"]["category"] == "always_zero"  # kept until rewritten


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
    with pytest.raises(StoreError, match="Not a directory \\(ENOTDIR\\)") as info:
        JsonFileStore(str(tmp_path / "file" / "hosts.json"))
    assert str(tmp_path / "file" / "hosts.json") in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


def test_unreadable_file_raises_store_error_naming_the_file_and_the_os_error(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path.write_bytes(GOOD_TEXT)
    real_open = os.open

    def denied(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(name) == str(path):
            raise PermissionError(13, "Permission denied")
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)  # the tests may run as root: chmod would not do
    with pytest.raises(StoreError) as info:
        JsonFileStore(str(path))
    assert str(info.value) == f"JSON store {path}: cannot read: Permission denied (EACCES)"
    assert isinstance(info.value.__cause__, PermissionError)


def test_failed_write_raises_store_error_and_changes_nothing(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonFileStore(str(path))
    store.set("a.example", HostState(host="a.example", evidence="old"))

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StoreError) as info:
        store.set("a.example", HostState(host="a.example", evidence="new"))
    assert str(info.value) == f"JSON store {path}: cannot write: No space left on device (ENOSPC)"
    assert isinstance(info.value.__cause__, OSError)
    monkeypatch.undo()
    assert store.get("a.example") == HostState(host="a.example", evidence="old")
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_lock_held_elsewhere_raises_store_error_after_the_timeout(path: Path) -> None:
    store = JsonFileStore(str(path), lock_timeout=0.05)
    other = filelock.FileLock(str(path) + ".lock")
    other.acquire(timeout=1)
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            store.set("a.example", HostState(host="a.example"))
    finally:
        other.release()
    store.set("a.example", HostState(host="a.example"))


def test_closed_store_raises_store_error(path: Path) -> None:
    store = JsonFileStore(str(path))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("a.example")
