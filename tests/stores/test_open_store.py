"""open_store: every spec form, unknown schemes, missing optional dependencies."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from requests_retryafter.errors import ConfigurationError
from requests_retryafter.state import HostState
from requests_retryafter.stores import STORES, MemoryStore, open_store
from requests_retryafter.stores.jsonfile import JsonFileStore
from requests_retryafter.stores.shelf import ShelveStore
from requests_retryafter.stores.sqlite import SqliteStore


def round_trip(store: Any) -> None:
    try:
        store.set("a.example", HostState(host="a.example"))
        assert store.get("a.example") == HostState(host="a.example")
    finally:
        store.close()


def test_memory() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_store(None), MemoryStore)


def test_a_store_object_is_returned_as_is(tmp_path: Path) -> None:
    store = JsonFileStore(str(tmp_path / "x.json"))
    assert open_store(store) is store


@pytest.mark.parametrize(
    ("scheme", "cls", "name"),
    [
        ("json", JsonFileStore, "hosts.json"),
        ("sqlite", SqliteStore, "hosts.db"),
        ("shelve", ShelveStore, "hosts"),
    ],
)
def test_absolute_path_with_three_slashes(
    tmp_path: Path, scheme: str, cls: type, name: str
) -> None:
    spec = f"{scheme}://{tmp_path}/sub/{name}"  # tmp_path starts with "/": three slashes
    assert spec.startswith(f"{scheme}:///")
    store = open_store(spec)
    assert type(store) is cls
    assert store.path == str(tmp_path / "sub" / name)  # type: ignore[attr-defined]
    round_trip(store)


@pytest.mark.parametrize(
    ("scheme", "cls", "name"),
    [
        ("json", JsonFileStore, "hosts.json"),
        ("sqlite", SqliteStore, "hosts.db"),
        ("shelve", ShelveStore, "hosts"),
    ],
)
def test_relative_path_with_two_slashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str, cls: type, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store(f"{scheme}://rel/{name}")
    assert type(store) is cls
    assert store.path == str(tmp_path / "rel" / name)  # type: ignore[attr-defined]
    round_trip(store)


def test_scheme_is_case_insensitive(tmp_path: Path) -> None:
    store = open_store(f"JSON://{tmp_path}/hosts.json")
    assert isinstance(store, JsonFileStore)
    round_trip(store)


def test_home_directory_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    store = open_store("sqlite://~/hosts.db")
    assert store.path == str(tmp_path / "hosts.db")  # type: ignore[attr-defined]
    round_trip(store)


def test_redis_spec() -> None:
    pytest.importorskip("redis")
    from requests_retryafter.stores.redis import RedisStore

    store = open_store("redis://127.0.0.1:6390/2?prefix=x")
    assert isinstance(store, RedisStore)
    assert store.prefix == "x"
    store.close()


@pytest.mark.parametrize("spec", ["json://", "sqlite:///", "shelve://dir/", "json:///var/lib/job/"])
def test_spec_without_a_file_is_a_configuration_error(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="names no file"):
        open_store(spec)


@pytest.mark.parametrize("spec", ["ftp://host/x", "postgres://db/hosts", "hosts.json"])
def test_unknown_or_missing_scheme_is_a_configuration_error(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_store(spec)
    assert isinstance(info.value, ValueError)


def test_every_registered_scheme_names_an_importable_class() -> None:
    import importlib

    for scheme, (module, name) in STORES.items():
        if scheme.startswith("redis"):
            pytest.importorskip("redis")
        cls = getattr(importlib.import_module(module), name)
        assert cls.scheme == scheme or (scheme == "rediss" and cls.scheme == "redis")
        assert callable(cls.from_url)


def test_missing_redis_raises_import_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # makes "import redis" fail
    monkeypatch.delitem(sys.modules, "requests_retryafter.stores.redis", raising=False)
    with pytest.raises(ImportError, match=r"pip install requests-retryafter\[redis\]"):
        open_store("redis://localhost:6379/0")
