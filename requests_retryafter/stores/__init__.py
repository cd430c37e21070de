"""Stores keep what the adapter learned about each host, between calls, runs and workers.

:func:`open_store` turns a spec string (``memory://``, ``json://PATH``, ``shelve://PATH``,
``sqlite://PATH``, ``redis://HOST:PORT/DB``, ``rediss://`` for Redis over TLS) or a store
object into a store.
"""

from __future__ import annotations

import importlib
from typing import Dict, Tuple, Union

from ..errors import ConfigurationError
from .base import BaseStore, MemoryStore, StateStore, Updater

__all__ = ["STORES", "BaseStore", "MemoryStore", "StateStore", "Updater", "open_store"]

#: Scheme -> (module, class name). Modules are imported only when their scheme is used, so
#: that ``import requests_retryafter`` never imports an optional dependency such as redis.
STORES: Dict[str, Tuple[str, str]] = {
    "memory": (__name__ + ".base", "MemoryStore"),
    "json": (__name__ + ".jsonfile", "JsonFileStore"),
    "shelve": (__name__ + ".shelf", "ShelveStore"),
    "sqlite": (__name__ + ".sqlite", "SqliteStore"),
    "redis": (__name__ + ".redis", "RedisStore"),
    "rediss": (__name__ + ".redis", "RedisStore"),
}


def open_store(spec: Union[str, StateStore, None], *, read_only: bool = False) -> StateStore:
    """Return a store for ``spec``: a store object (returned as is), ``None`` (a new
    :class:`MemoryStore`) or a spec string whose scheme picks the backend.

    With ``read_only=True`` the store never creates a file, directory or lock file, never
    moves anything aside and refuses writes with :class:`~requests_retryafter.StoreError`; a
    file store whose path does not exist raises StoreError ("does not exist").

    Raises:
        ConfigurationError: an unknown scheme or a malformed spec.
        ImportError: the backend's optional dependency is missing; the message names the
            extra to install.
        StoreError: the store cannot be opened: its path is not a regular file or not a
            store of this library (nothing is changed), it is locked by another process, or
            (read-only) it does not exist. The message names the file and the reason.
    """
    if spec is None:
        return MemoryStore(read_only=read_only)
    if not isinstance(spec, str):
        if isinstance(spec, StateStore):
            return spec
        raise ConfigurationError(f"not a store or a store spec: {type(spec).__name__}")
    scheme, sep, _ = spec.partition("://")
    if not sep:
        raise ConfigurationError(
            f"store spec {spec!r} has no scheme; use one of: "
            + ", ".join(f"{s}://" for s in sorted(STORES))
        )
    target = STORES.get(scheme.lower())
    if target is None:
        raise ConfigurationError(
            f"unknown store scheme {scheme!r}; known: " + ", ".join(sorted(STORES))
        )
    module = importlib.import_module(target[0])
    cls = getattr(module, target[1])
    # A store class of the user's own may predate the flag: pass it only when it is asked for.
    store: StateStore = cls.from_url(spec, read_only=True) if read_only else cls.from_url(spec)
    return store
