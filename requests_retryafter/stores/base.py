"""The store interface and the in-process :class:`MemoryStore`."""

from __future__ import annotations

import logging
import threading
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Protocol,
    Set,
    Tuple,
    runtime_checkable,
)

from ..errors import StoreError
from ..state import HostState

__all__ = ["BaseStore", "MemoryStore", "StateStore", "Updater"]

logger = logging.getLogger(__name__)


def salvaged(
    host: str,
    where: str,
    raw: Any,
    parse: Callable[[List[str]], HostState],
    warned: Optional[Dict[str, Any]] = None,
) -> HostState:
    """The state ``parse`` makes of the stored ``raw`` value, leaving out malformed parts (see
    :meth:`HostState.from_dict`'s ``dropped``): what was left out is logged as a warning,
    once per distinct ``raw`` where ``warned`` keeps track. Raises as ``parse`` does when the
    whole entry is unusable."""
    dropped: List[str] = []
    state = parse(dropped)
    if dropped and (warned is None or warned.get(host) != raw):
        if warned is not None:
            warned[host] = raw
        logger.warning(
            "kept the stored state of host %s in %s without its malformed %s",
            host,
            where,
            "; ".join(dropped),
        )
    return state


#: Called with the stored state (or ``None``) and returns the state to store.
Updater = Callable[[Optional[HostState]], HostState]


@runtime_checkable
class StateStore(Protocol):
    """What the adapter needs of a store. Implement these five methods and ``update`` to plug
    in a backend of your own (see the *stores* page of the docs for a recipe).

    Keys are host keys (``host`` or ``host:port``); values are :class:`HostState`.
    """

    def get(self, host: str) -> Optional[HostState]:
        """Return the stored state of ``host``, or ``None``."""

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host``, replacing what was there."""

    def update(self, host: str, fn: Updater) -> HostState:
        """Atomically replace the state of ``host`` with ``fn(current)`` and return it.

        Backends shared between processes must make this read-modify-write atomic, so that
        two writers never lose each other's observations. When ``fn`` returns ``current``
        itself, nothing changed: the backends here write nothing then (a waiting worker reads
        the shared schedule this way without disturbing the others' updates).
        """

    def delete(self, host: str) -> None:
        """Forget ``host`` (no error when it is not stored)."""

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over every stored ``(host, state)``."""

    def close(self) -> None:
        """Flush and release resources; the store is not used afterwards."""


class BaseStore:
    """Convenience base: a lock-based :meth:`update`, a no-op :meth:`close` and context-manager
    support. Subclasses implement ``get``, ``set``, ``delete`` and ``items``.

    ``shared`` tells the adapter whether other processes may write the same store (it then
    re-reads a host's state from time to time to see their holds and waits).
    """

    #: Whether other processes may write the same store.
    shared = False
    #: The scheme :func:`~requests_retryafter.open_store` knows this backend by.
    scheme = ""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def get(self, host: str) -> Optional[HostState]:  # pragma: no cover - abstract
        """Return the stored state of ``host``, or ``None``."""
        raise NotImplementedError

    def set(self, host: str, state: HostState) -> None:  # pragma: no cover - abstract
        """Store ``state`` for ``host``."""
        raise NotImplementedError

    def delete(self, host: str) -> None:  # pragma: no cover - abstract
        """Forget ``host``."""
        raise NotImplementedError

    def items(self) -> Iterator[Tuple[str, HostState]]:  # pragma: no cover - abstract
        """Iterate over every stored ``(host, state)``."""
        raise NotImplementedError

    def update(self, host: str, fn: Updater) -> HostState:
        """Replace the state of ``host`` with ``fn(current)`` under this object's lock."""
        with self._lock:
            current = self.get(host)
            new = fn(current)
            if new is not current:
                self.set(host, new)
            return new

    def close(self) -> None:
        """Release resources (nothing to do here)."""

    def _note_newer(self, told: Set[str], host: str, where: str, exc: Exception) -> None:
        """Say once per host (``told`` remembers) that its stored state was written by another
        version and is left as it is."""
        if host not in told:
            told.add(host)
            logger.info(
                "ignoring the stored state of host %s in %s and leaving it as it is: %s "
                "(written by another version of requests-retryafter)",
                host,
                where,
                exc,
            )

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemoryStore(BaseStore):
    """Keeps host state in this process only (the default). Thread-safe. Adapters given the
    same ``MemoryStore`` object share what they learn, their waits and their pace.

    Spec: ``memory://``. ``read_only=True`` gives an empty store that refuses writes.
    """

    scheme = "memory"
    shared = True

    def __init__(self, *, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only
        self._data: Dict[str, HostState] = {}

    @classmethod
    def from_url(cls, url: str, *, read_only: bool = False) -> MemoryStore:
        """Build from a ``memory://`` spec."""
        return cls(read_only=read_only)

    def _check_writable(self) -> None:
        if self.read_only:
            raise StoreError("memory store: opened read-only; not written")

    def get(self, host: str) -> Optional[HostState]:
        """Return the state of ``host``, or ``None``."""
        with self._lock:
            return self._data.get(host)

    def set(self, host: str, state: HostState) -> None:
        """Store ``state`` for ``host``."""
        self._check_writable()
        with self._lock:
            self._data[host] = state

    def delete(self, host: str) -> None:
        """Forget ``host``."""
        self._check_writable()
        with self._lock:
            self._data.pop(host, None)

    def items(self) -> Iterator[Tuple[str, HostState]]:
        """Iterate over a snapshot of every ``(host, state)``."""
        with self._lock:
            snapshot = list(self._data.items())
        return iter(snapshot)

    def __repr__(self) -> str:
        return "MemoryStore()"
