"""The file stores never touch what is not theirs: special files, read-only opening,
permissions and groups, symbolic links, lock files and locks held by others."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

from requests_retryafter.errors import StoreError
from requests_retryafter.state import HostState
from requests_retryafter.stores import MemoryStore, _files, jsonfile, open_store, sqlite

FILE_SCHEMES = ["json", "sqlite", "shelve"]


def spec(scheme: str, path: Any) -> str:
    return f"{scheme}://{path}"


def listing(directory: Path) -> Dict[str, Any]:
    """Every entry under ``directory`` with what identifies its state."""
    out: Dict[str, Any] = {}
    for p in sorted(directory.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(directory))] = (st.st_mode, st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def open_in_thread(fn: Callable[[], Any], seconds: float = 10.0) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging) when it blocks."""
    result: List[Any] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "opening the store blocked"
    return result[0]


@pytest.fixture
def closing() -> Iterator[List[Any]]:
    stores: List[Any] = []
    yield stores
    for store in stores:
        store.close()


# -- paths that are not regular files ------------------------------------------------------


@pytest.fixture(params=["fifo", "directory", "socket", "character device"])
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    kind = request.param
    if kind == "character device":
        yield Path(os.devnull)
        return
    path = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        yield path
        sock.close()
        return
    yield path


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("scheme", FILE_SCHEMES)
def test_a_path_that_is_not_a_regular_file_is_refused_without_blocking(
    scheme: str, special: Path, read_only: bool
) -> None:
    before = os.stat(special)
    parent = listing(special.parent) if special.parent != Path("/dev") else None
    outcome = open_in_thread(lambda: open_store(spec(scheme, special), read_only=read_only))
    assert isinstance(outcome, StoreError), outcome
    assert str(special) in str(outcome)
    assert "not a regular file" in str(outcome)
    after = os.stat(special)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode,
        before.st_ino,
        before.st_rdev,
    )
    if parent is not None:
        assert listing(special.parent) == parent  # no lock file, no backup, nothing
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("scheme", ["json", "sqlite"])
def test_a_lock_path_that_is_a_fifo_is_refused(scheme: str, tmp_path: Path) -> None:
    name = "hosts.json" if scheme == "json" else "hosts.db"
    os.mkfifo(tmp_path / (name + ".lock"))
    outcome = open_in_thread(lambda: open_store(spec(scheme, tmp_path / name)))
    assert isinstance(outcome, StoreError), outcome
    assert "a FIFO" in str(outcome)


# -- read-only -------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", FILE_SCHEMES)
def test_read_only_on_a_missing_path_creates_nothing(scheme: str, tmp_path: Path) -> None:
    target = tmp_path / "typo" / "hosts"
    with pytest.raises(StoreError, match="does not exist") as info:
        open_store(spec(scheme, target), read_only=True)
    assert str(target) in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scheme", FILE_SCHEMES)
def test_read_only_reads_and_changes_nothing(scheme: str, tmp_path: Path) -> None:
    target = tmp_path / "hosts"
    with open_store(spec(scheme, target)) as writer:  # type: ignore[attr-defined]
        writer.set("a.example", HostState(host="a.example", evidence="kept"))
    for lock in tmp_path.glob("*.lock"):
        lock.unlink()
    before = listing(tmp_path)
    reader = open_store(spec(scheme, target), read_only=True)
    try:
        assert reader.get("a.example") == HostState(host="a.example", evidence="kept")
        assert dict(reader.items()) == {"a.example": HostState(host="a.example", evidence="kept")}
        for write in (
            lambda: reader.set("b.example", HostState(host="b.example")),
            lambda: reader.update("b.example", lambda s: HostState(host="b.example")),
            lambda: reader.delete("a.example"),
        ):
            with pytest.raises(StoreError, match="read-only"):
                write()
        assert listing(tmp_path) == before  # no lock file, no -shm, nothing written
    finally:
        reader.close()
    assert listing(tmp_path) == before


def test_read_only_json_does_not_move_a_damaged_store_aside(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    target.write_bytes(b'{"format":"requests-retryafter","hosts":{"a.ex')
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="damaged") as info:
        open_store(spec("json", target), read_only=True)
    assert str(target) in str(info.value)
    assert listing(tmp_path) == before


def test_read_only_sqlite_does_not_move_a_damaged_store_aside(tmp_path: Path) -> None:
    target = tmp_path / "hosts.db"
    with sqlite.SqliteStore(str(target)) as store:
        for i in range(300):
            store.set(f"h{i}.example", HostState(host=f"h{i}.example", evidence="x" * 500))
    data = bytearray(target.read_bytes())
    data[4096 * 2 : 4096 * 4] = os.urandom(4096 * 2)
    target.write_bytes(bytes(data))
    for extra in tmp_path.glob("hosts.db?*"):
        extra.unlink()
    before = listing(tmp_path)
    with pytest.raises(StoreError, match="damaged"):
        open_store(spec("sqlite", target), read_only=True)
    assert listing(tmp_path) == before


def test_read_only_memory_and_open_store_pass_the_flag() -> None:
    store = open_store("memory://", read_only=True)
    assert isinstance(store, MemoryStore)
    with pytest.raises(StoreError, match="read-only"):
        store.set("a.example", HostState(host="a.example"))
    assert open_store(None, read_only=True).read_only  # type: ignore[attr-defined]


# -- permissions, groups, symbolic links, lock files -----------------------------------------


def other_gid() -> int:
    """A group other than this process's, when this process may give files to it (root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another group")
    return os.getegid() + 4242


def test_json_write_keeps_the_files_permission_bits_and_group(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    jsonfile.JsonFileStore(str(target)).set("a.example", HostState(host="a.example"))
    os.chmod(target, 0o664)
    gid = other_gid()
    os.chown(target, -1, gid)
    store = jsonfile.JsonFileStore(str(target))
    store.set("b.example", HostState(host="b.example"))
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o664
    assert st.st_gid == gid
    assert sorted(json.loads(target.read_text())["hosts"]) == ["a.example", "b.example"]


def test_json_write_keeps_permission_bits_without_root(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    jsonfile.JsonFileStore(str(target)).set("a.example", HostState(host="a.example"))
    os.chmod(target, 0o640)
    jsonfile.JsonFileStore(str(target)).set("b.example", HostState(host="b.example"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_new_json_store_is_private(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    jsonfile.JsonFileStore(str(target)).set("a.example", HostState(host="a.example"))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize("scheme", ["json", "sqlite"])
def test_a_symlinked_store_writes_through_to_its_target(
    scheme: str, tmp_path: Path, closing: List[Any]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "hosts"
    link = tmp_path / "mine"
    link.symlink_to(target)
    first = open_store(spec(scheme, link))
    closing.append(first)
    first.set("a.example", HostState(host="a.example"))
    first.set("b.example", HostState(host="b.example"))
    assert link.is_symlink()
    assert os.readlink(link) == str(target)
    direct = open_store(spec(scheme, target))
    closing.append(direct)
    assert sorted(h for h, _ in direct.items()) == ["a.example", "b.example"]
    assert (shared / "hosts.lock").exists()  # the target's lock: shared with every user
    assert not (tmp_path / "mine.lock").exists()


def test_lock_file_takes_the_store_files_mode(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    jsonfile.JsonFileStore(str(target)).set("a.example", HostState(host="a.example"))
    (tmp_path / "hosts.json.lock").unlink()
    os.chmod(target, 0o660)
    old = os.umask(0o022)
    try:
        jsonfile.JsonFileStore(str(target)).set("b.example", HostState(host="b.example"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "hosts.json.lock").stat().st_mode) == 0o660


def test_a_0644_lock_file_of_a_shared_store_is_opened_up(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    jsonfile.JsonFileStore(str(target)).set("a.example", HostState(host="a.example"))
    os.chmod(target, 0o664)
    os.chmod(tmp_path / "hosts.json.lock", 0o644)  # as older versions made it
    jsonfile.JsonFileStore(str(target)).set("b.example", HostState(host="b.example"))
    assert stat.S_IMODE((tmp_path / "hosts.json.lock").stat().st_mode) == 0o664


def test_lock_file_group_follows_the_store_file(tmp_path: Path) -> None:
    target = tmp_path / "hosts.json"
    jsonfile.JsonFileStore(str(target)).set("a.example", HostState(host="a.example"))
    gid = other_gid()
    os.chown(target, -1, gid)
    (tmp_path / "hosts.json.lock").unlink()
    jsonfile.JsonFileStore(str(target)).set("b.example", HostState(host="b.example"))
    assert (tmp_path / "hosts.json.lock").stat().st_gid == gid


# -- locks held by another process -----------------------------------------------------------


def test_default_timeouts_are_short() -> None:
    assert jsonfile.DEFAULT_LOCK_TIMEOUT <= 2.0
    assert sqlite.DEFAULT_TIMEOUT <= 2.0


def test_json_lock_held_elsewhere_gives_up_with_locked_by_another_process(
    tmp_path: Path,
) -> None:
    target = tmp_path / "hosts.json"
    target.write_bytes(b'{"format":"requests-retryafter","hosts":{"a.ex')  # needs the lock
    other = _files.LockFile("test", str(target), str(target) + ".lock")
    other.acquire(1)  # another open file description: flock treats it as another process
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="locked by another process") as info:
            jsonfile.JsonFileStore(str(target), lock_timeout=0.1)
        assert time.monotonic() - started < 2
        assert str(target) in str(info.value)
    finally:
        other.release()


def test_sqlite_exclusive_transaction_elsewhere_gives_up_at_open(tmp_path: Path) -> None:
    target = tmp_path / "hosts.db"
    conn = sqlite3.connect(str(target), isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("CREATE TABLE hosts (host TEXT PRIMARY KEY, state TEXT NOT NULL, updated REAL)")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="locked by another process") as info:
            sqlite.SqliteStore(str(target), timeout=0.1)
        assert time.monotonic() - started < 2
        assert str(target) in str(info.value)
    finally:
        conn.execute("ROLLBACK")
        conn.close()
