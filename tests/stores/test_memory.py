"""MemoryStore against the store contract."""

from __future__ import annotations

from typing import Any

from requests_retryafter.state import HostState
from requests_retryafter.stores import MemoryStore, open_store

from .contract import StoreContract


class TestMemoryStore(StoreContract):
    persistent = False
    expected_shared = True
    scheme = "memory"

    def make_store(self, location: Any) -> Any:
        return open_store("memory://")


def test_memory_stores_are_independent() -> None:
    a, b = MemoryStore(), MemoryStore()
    a.set("x.example", HostState(host="x.example"))
    assert b.get("x.example") is None
