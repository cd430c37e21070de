"""The world the Python snippets of README.md and docs/*.md run in.

They run as tests with pytest-markdown-docs (``pip install -e '.[test]'``)::

    python -m pytest --markdown-docs -p no:cacheprovider README.md docs

Each snippet runs in a fresh temporary directory, which is also ``$HOME`` (so a store spec
such as ``sqlite://~/ingest/hosts.db`` stays inside it), with no ``REQUESTS_RETRYAFTER_*``
variable set and with the store registry restored afterwards. The internet is a local
:class:`~requests_retryafter.testing.RateLimitedServer` on 127.0.0.1: a request to any other
host (``https://data.example.gov/...``) is sent there over real HTTP by the plain
``HTTPAdapter`` underneath the adapter, so the adapter under test is the real one and only the
address changes. That server never refuses, so a snippet on the real clock never sleeps.

A snippet also finds these globals, the stand-ins for a user's own code: ``requests``,
``session`` (a fresh ``requests.Session``), ``url`` (a page of ``https://data.example.gov``),
``store_rows``, ``metrics``, ``scheduler`` and ``failed``.

Nothing here is active outside those snippets: the autouse fixture returns at once for every
other test.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import pytest

_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class _Metrics:
    """Stands in for a metrics client: remembers what was observed."""

    def __init__(self) -> None:
        self.observed: List[Tuple[str, float, Dict[str, Any]]] = []

    def observe(self, name: str, value: float, **labels: Any) -> None:
        self.observed.append((name, value, labels))


class _Scheduler:
    """Stands in for a job scheduler: remembers what it was asked to retry."""

    def __init__(self) -> None:
        self.retries: List[Tuple[str, float, str]] = []

    def retry_at(self, when: float, url: str) -> None:
        self.retries.append(("at", when, url))

    def retry_in(self, delay: float, url: str) -> None:
        self.retries.append(("in", delay, url))


class _World:
    """The local internet and the globals of one snippet."""

    def __init__(self) -> None:
        import requests

        from requests_retryafter.testing import RateLimitedServer, Unlimited

        self.server = RateLimitedServer(Unlimited())
        self.server.start()
        self.session = requests.Session()
        self.globals: Dict[str, Any] = {
            "requests": requests,
            "session": self.session,
            "url": "https://data.example.gov/api/permits?page=1",
            "store_rows": lambda rows: None,
            "metrics": _Metrics(),
            "scheduler": _Scheduler(),
            "failed": [],
        }

    def close(self) -> None:
        self.session.close()
        self.server.stop()


_WORLD: Optional[_World] = None


def _world() -> _World:
    # pytest-markdown-docs asks for the globals before it sets the fixtures up (0.9), so
    # whichever comes first starts the world and the fixture's teardown ends it.
    global _WORLD
    if _WORLD is None:
        _WORLD = _World()
    return _WORLD


def _is_snippet(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("markdown-docs") is not None


@pytest.fixture(autouse=True)
def _snippet_world(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a markdown snippet: a temporary home, a clean environment, a local internet."""
    if not _is_snippet(request):
        yield
        return

    import requests
    from requests.adapters import HTTPAdapter

    from requests_retryafter.stores import STORES

    world = _world()
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    tmp_path = request.getfixturevalue("tmp_path")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in list(os.environ):
        if name.upper().startswith("REQUESTS_RETRYAFTER_"):
            monkeypatch.delenv(name)
    saved_stores = dict(STORES)
    plain_send = HTTPAdapter.send
    target = urlsplit(world.server.url)

    def send_locally(
        self: HTTPAdapter, request: requests.PreparedRequest, *args: Any, **kwargs: Any
    ) -> requests.Response:
        parts = urlsplit(request.url or "")
        if (parts.hostname or "") in _LOCAL_HOSTS:
            return plain_send(self, request, *args, **kwargs)
        local = request.copy()
        local.url = urlunsplit(("http", target.netloc, parts.path, parts.query, ""))
        local.headers["Host"] = parts.netloc.rpartition("@")[2]
        kwargs["proxies"] = {}
        response = plain_send(self, local, *args, **kwargs)
        response.url = request.url or ""
        response.request = request
        return response

    monkeypatch.setattr(HTTPAdapter, "send", send_locally)
    try:
        yield
    finally:
        global _WORLD
        _WORLD = None
        world.close()
        STORES.clear()
        STORES.update(saved_stores)


@pytest.hookimpl(optionalhook=True)
def pytest_markdown_docs_globals() -> Dict[str, Any]:
    """The globals of every markdown snippet (see the module's docstring)."""
    return dict(_world().globals)
