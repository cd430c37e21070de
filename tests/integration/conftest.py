"""Fixtures for the adapter tests: scripted rate-limited hosts on the shared ``server``; plain
HTTP against the test servers (``session``, ``statuses``); and the benchmarks' modules: the
scenarios importable as ``scenarios`` (and ``_realtime``, which scripts import), any script
loaded fresh by ``load_benchmark``."""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, ContextManager, Iterator, List, Optional, Tuple

import pytest
import requests

from requests_retryafter import FakeClock, HostState, open_store

#: The repository's benchmarks/ directory. Its scenarios module is benchmark code, not part of
#: the installed package; the benchmark scripts import it as ``scenarios`` (a script's
#: directory comes first on ``sys.path``), and so do these tests.
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _exec_benchmark(name: str, module_name: str) -> ModuleType:
    """Run ``benchmarks/<name>.py`` as a new module registered as ``module_name`` (its
    dataclasses look their module up in ``sys.modules``); the caller removes it."""
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


@contextmanager
def _fresh_benchmark(name: str, module_name: Optional[str] = None) -> Iterator[ModuleType]:
    module_name = name if module_name is None else module_name
    module = _exec_benchmark(name, module_name)
    try:
        yield module
    finally:
        sys.modules.pop(module_name, None)


def _load_benchmark_helpers() -> None:
    """Make the modules the benchmark scripts import from their own directory importable:
    ``scenarios`` (for these tests too) and ``_realtime``."""
    for name in ("scenarios", "_realtime"):
        loaded = sys.modules.get(name)
        if (
            loaded is not None
            and Path(getattr(loaded, "__file__", "")) == BENCHMARKS / f"{name}.py"
        ):
            continue
        _exec_benchmark(name, name)


_load_benchmark_helpers()

#: ``load_benchmark(name, module_name=None)``: a context manager giving ``benchmarks/<name>.py``
#: executed afresh (registered in ``sys.modules`` as ``module_name``, default ``name``, while it
#: lasts).
LoadBenchmark = Callable[..., ContextManager[ModuleType]]


@pytest.fixture(scope="session")
def load_benchmark() -> LoadBenchmark:
    """Load a benchmark script (``benchmarks/<name>.py``) as a fresh module: ``with
    load_benchmark("bench_nginx") as bench: ...``. Nothing of it is built until then."""
    return _fresh_benchmark


@pytest.fixture
def session() -> Iterator[requests.Session]:
    """A plain :class:`requests.Session` (no retrying adapter), closed after the test."""
    with requests.Session() as s:
        yield s


#: ``statuses(server, count)``: the status codes of ``count`` GETs of distinct paths.
Statuses = Callable[[Any, int], List[int]]


@pytest.fixture
def statuses(session: requests.Session) -> Statuses:
    """``statuses(server, count)``: GET ``server.url + "/r/<i>"`` for ``i`` in
    ``range(count)`` on the test's ``session`` and return the status codes in order. ``server``
    is anything with a ``url`` (a RateLimitedServer, a Portal)."""

    def fetch(server: Any, count: int) -> List[int]:
        return [session.get(f"{server.url}/r/{i}", timeout=5).status_code for i in range(count)]

    return fetch


#: ``header(remaining, episode)``: the Retry-After a penalty box sends (``None``: none).
HeaderFn = Callable[[float, int], Optional[str]]


class WindowHost:
    """A host that lets ``allow`` requests through per fixed window of ``window`` seconds
    (windows start at multiples of ``window`` in virtual epoch time) and refuses the rest until
    the window ends.

    The real recovery after a refusal is the time left in the window; ``header(remaining,
    episode)`` is what the host says about it. An episode starts at a window's first refusal.
    """

    def __init__(
        self,
        clock: FakeClock,
        *,
        allow: int,
        window: float,
        header: HeaderFn,
        status: int = 429,
    ) -> None:
        self.clock = clock
        self.allow = allow
        self.window = window
        self.header = header
        self.status = status
        self.lock = threading.Lock()
        self._current: Optional[int] = None
        self.served = 0
        #: Episodes started; refusals in each, in order.
        self.refusals: List[int] = []
        #: Episodes that ended with a request served in a later window.
        self.recovered = 0
        #: ``(arrival time, status)`` of every request.
        self.log: List[Tuple[float, int]] = []

    @property
    def episodes(self) -> int:
        return len(self.refusals)

    def __call__(self, seen):  # -> (status, headers)
        now = seen.time
        with self.lock:
            index = math.floor(now / self.window)
            if index != self._current:
                if self._current is not None and self.served > self.allow:
                    self.recovered += 1
                self._current, self.served = index, 0
            self.served += 1
            if self.served <= self.allow:
                self.log.append((now, 200))
                return 200, {}
            self.log.append((now, self.status))
            if self.served == self.allow + 1:
                self.refusals.append(0)
            self.refusals[-1] += 1
            remaining = (index + 1) * self.window - now
            value = self.header(remaining, self.episodes)
            return self.status, ({} if value is None else {"Retry-After": value})


@pytest.fixture
def window_host(server, clock: FakeClock) -> Callable[..., WindowHost]:
    """Install a :class:`WindowHost` as the ``server``'s answer."""

    def install(**kwargs) -> WindowHost:
        box = WindowHost(clock, **kwargs)
        server.respond(box)
        return box

    return install


@pytest.fixture
def held_store_spec(server, clock: FakeClock, tmp_path: Path) -> str:
    """A JSON store spec in which the ``server``'s host is held for an hour ("asked for an
    hour")."""
    spec = f"json://{tmp_path}/hosts.json"
    with open_store(spec) as store:
        store.set(
            server.host,
            HostState(
                server.host,
                held_until=clock.time() + 3600,
                hold_reason="asked for an hour",
                updated_at=clock.time(),
            ),
        )
    return spec
