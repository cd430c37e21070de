"""A pytest plugin that runs a test suite with :class:`~requests_retryafter.RetryAfterAdapter`
in place of the default adapter of every :class:`requests.Session`.

Load it with ``-p retryafter_swap`` (this directory on ``PYTHONPATH``); ``.ci/requests-suite.sh``
uses it to run requests' own test suite twice, as is and with the swap, and compares the
outcomes test for test.

``Session.__init__`` mounts ``requests.sessions.HTTPAdapter()`` for ``https://`` and
``http://``; the plugin rebinds that name to :class:`RetryAfterAdapter`, so each new session
gets two fresh adapters with the adapter's defaults (an in-memory store: every
``REQUESTS_RETRYAFTER_*`` variable is removed from the environment). Adapters that a test
builds itself from ``requests.adapters.HTTPAdapter`` are left as they are: they are not the
default.

The plugin checks at start-up that a new session really has the adapter mounted (and stops
the run if not), prints a report header saying so, and records the suite property
``requests_retryafter_adapter`` in the JUnit XML, so the comparison can tell the runs apart.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import pytest
import requests
import requests.sessions

from requests_retryafter import MemoryStore, RetryAfterAdapter
from requests_retryafter.policy import ENV_PREFIX

try:  # private, but the only way to the report object from a hook (pytest >= 7)
    from _pytest.junitxml import xml_key
except ImportError:  # pragma: no cover - a pytest that moved it: no mark, compare.py says so
    xml_key = None  # type: ignore[assignment]

__all__ = ["PROPERTY", "SuiteAdapter", "check_swap"]

#: Name of the JUnit XML suite property this plugin records (its value: the adapter's class).
PROPERTY = "requests_retryafter_adapter"

#: What ``Session.__init__`` mounts once the plugin is active.
SuiteAdapter = RetryAfterAdapter

_description = pytest.StashKey[str]()
_saved: Optional[Any] = None
_removed_env: Dict[str, str] = {}


def check_swap() -> str:
    """Build a session and return a description of what it mounts.

    Raises:
        pytest.UsageError: a new session does not have a :class:`RetryAfterAdapter` with an
            in-memory store mounted for both ``http://`` and ``https://``.
    """
    with requests.Session() as session:
        found: List[str] = []
        for prefix in ("https://", "http://"):
            adapter = session.get_adapter(prefix + "example.invalid/")
            if not isinstance(adapter, RetryAfterAdapter):
                raise pytest.UsageError(
                    f"retryafter_swap: a new Session mounts {type(adapter).__name__} for "
                    f"{prefix}, not RetryAfterAdapter (did requests stop using "
                    "requests.sessions.HTTPAdapter?)"
                )
            if not isinstance(adapter.store, MemoryStore):
                raise pytest.UsageError(
                    f"retryafter_swap: the adapter for {prefix} uses "
                    f"{type(adapter.store).__name__}, not MemoryStore"
                )
            found.append(f"{prefix} {type(adapter).__name__}")
        if session.adapters["https://"] is session.adapters["http://"]:
            raise pytest.UsageError("retryafter_swap: one adapter is shared by both prefixes")
    return ", ".join(found) + " (fresh per session, MemoryStore)"


@pytest.hookimpl(trylast=True)  # after junitxml has made its report object
def pytest_configure(config: pytest.Config) -> None:
    """Remove ``REQUESTS_RETRYAFTER_*`` from the environment, swap the default adapter, check
    the swap, and mark the JUnit XML report (in the process that writes it: with
    pytest-xdist, the controller; ``record_testsuite_property`` does not reach it from
    workers)."""
    global _saved
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        _removed_env[name] = os.environ.pop(name)
    _saved = requests.sessions.HTTPAdapter
    requests.sessions.HTTPAdapter = SuiteAdapter  # type: ignore[assignment]
    config.stash[_description] = check_swap()
    xml = config.stash.get(xml_key, None) if xml_key is not None else None
    if xml is not None:
        xml.add_global_property(PROPERTY, SuiteAdapter.__name__)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put the default adapter and the environment back."""
    global _saved
    if _saved is not None:
        requests.sessions.HTTPAdapter = _saved
        _saved = None
    os.environ.update(_removed_env)
    _removed_env.clear()


def pytest_report_header(config: pytest.Config) -> str:
    """Say, at the top of the run, that sessions use the adapter."""
    return "retryafter_swap: requests.Session() mounts " + config.stash.get(_description, "?")
