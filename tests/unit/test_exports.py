"""The public API: what ``requests_retryafter`` exports, and what importing it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import requests

import requests_retryafter

ISSUE_NAMES = [
    "RetryAfterAdapter",
    "Policy",
    "SystemClock",
    "FakeClock",
    "open_store",
    "RetryAfterError",
    "RetryLimitExceeded",
    "RetryDeadlineExceeded",
    "HostHeld",
]


def _isort_key(name: str) -> tuple:
    # ruff RUF022's "isort-style": CONSTANTS, then Classes, then everything else.
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted_and_unique():
    names = list(requests_retryafter.__all__)
    assert len(set(names)) == len(names)
    # Sorted either plainly or isort-style (the order ruff keeps).
    assert names in (sorted(names), sorted(names, key=_isort_key))


def test_every_name_in_all_exists():
    for name in requests_retryafter.__all__:
        assert getattr(requests_retryafter, name, None) is not None, name


def test_issue_names_are_exported():
    assert set(ISSUE_NAMES) <= set(requests_retryafter.__all__)
    from requests_retryafter import (  # noqa: F401
        FakeClock,
        HostHeld,
        Policy,
        RetryAfterAdapter,
        RetryAfterError,
        RetryDeadlineExceeded,
        RetryLimitExceeded,
        SystemClock,
        open_store,
    )


def test_public_names_that_are_not_modules_are_in_all():
    public = {
        name
        for name, value in vars(requests_retryafter).items()
        if not name.startswith("_")
        and type(value).__name__ != "module"
        and name not in {"annotations", "logging", "version", "PackageNotFoundError"}
    }
    assert public <= set(requests_retryafter.__all__)


def test_error_hierarchy():
    from requests_retryafter import (
        ConfigurationError,
        HostHeld,
        RetryAfterError,
        RetryDeadlineExceeded,
        RetryLimitExceeded,
    )

    assert issubclass(RetryAfterError, requests.exceptions.RetryError)
    assert issubclass(RetryAfterError, requests.RequestException)
    for cls in (RetryLimitExceeded, RetryDeadlineExceeded, HostHeld):
        assert issubclass(cls, RetryAfterError)
    assert issubclass(ConfigurationError, ValueError)


def test_adapter_is_an_http_adapter():
    assert issubclass(requests_retryafter.RetryAfterAdapter, requests.adapters.HTTPAdapter)


def test_version_is_a_string():
    assert isinstance(requests_retryafter.__version__, str)
    assert requests_retryafter.__version__


def test_library_logger_has_a_null_handler():
    import logging

    handlers = logging.getLogger("requests_retryafter").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("REQUESTS_RETRYAFTER_")}
    environ.update(env)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_does_not_import_redis_or_other_optional_dependencies():
    out = _run(
        """
        import json, sys
        import requests_retryafter
        print(json.dumps(sorted(sys.modules)))
        """
    )
    modules = set(json.loads(out))
    assert "requests_retryafter" in modules  # the check itself works
    for optional in ("redis", "rich", "cachecontrol"):
        assert not any(m == optional or m.startswith(optional + ".") for m in modules), optional


def test_import_does_not_read_the_environment():
    # A bad value would raise if it were read at import; it is read when an adapter is built.
    out = _run(
        """
        import requests_retryafter
        print("imported")
        try:
            requests_retryafter.RetryAfterAdapter()
        except ValueError as exc:
            print("built:", exc)
        """,
        REQUESTS_RETRYAFTER_MAX_ATTEMPTS="banana",
    )
    lines = out.splitlines()
    assert lines[0] == "imported"
    assert lines[1].startswith("built:")
    assert "REQUESTS_RETRYAFTER_MAX_ATTEMPTS" in lines[1]
