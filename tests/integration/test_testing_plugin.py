"""The shipped pytest plugin: its fixtures, run by pytest itself inside pytest (pytester).

Each test writes a user's test module, runs it with ``-p requests_retryafter.pytest_plugin``
(autoloading off, so the result does not depend on whether the ``pytest11`` entry point is
installed) and checks the outcome. The inner tests talk to real servers on 127.0.0.1 and run
on the fixtures' FakeClock, so nothing sleeps.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, List

import pytest
import requests

pytest_plugins = ["pytester"]

PLUGIN = "requests_retryafter.pytest_plugin"


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run pytest on the written files with the plugin loaded by ``-p``."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # Imported afresh by the inner run, so that pytest can rewrite its asserts.
    monkeypatch.delitem(sys.modules, PLUGIN, raising=False)

    def go(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", PLUGIN, "-p", "no:cacheprovider", "-W", "error", *args)

    return go


def test_a_crawler_test_is_three_lines(pytester: pytest.Pytester, run: Any) -> None:
    pytester.makepyfile(
        """
        from requests_retryafter.testing import FixedWindow

        def crawl(session, urls):
            return [session.get(url, timeout=5).status_code for url in urls]

        def test_crawler(retryafter_session, rate_limited_server, retryafter_clock):
            server = rate_limited_server(FixedWindow(5, 60))
            assert crawl(retryafter_session, [f"{server.url}/{i}" for i in range(6)]) == [200] * 6
            assert server.rejected == 1
            assert retryafter_clock.sleeps == [40.0]  # 20 s into the minute: 40 s to go
        """
    )
    run().assert_outcomes(passed=1)


def test_a_wrong_expectation_fails(pytester: pytest.Pytester, run: Any) -> None:
    # The fixtures are real: the sixth request meets the limit, so claiming it did not fails.
    pytester.makepyfile(
        """
        from requests_retryafter.testing import FixedWindow

        def test_crawler(retryafter_session, rate_limited_server):
            server = rate_limited_server(FixedWindow(5, 60))
            for i in range(6):
                retryafter_session.get(f"{server.url}/{i}", timeout=5)
            assert server.rejected == 0
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 1 == 0*"])


def test_fixtures_are_wired_together_and_isolated(
    pytester: pytest.Pytester, run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A developer's variables must not reach the adapter (environ={}).
    monkeypatch.setenv("REQUESTS_RETRYAFTER_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("REQUESTS_RETRYAFTER_STORE", f"json://{tmp_path / 'state.json'}")
    pytester.makepyfile(
        """
        import requests

        from requests_retryafter import FakeClock, MemoryStore, Policy, RetryAfterAdapter
        from requests_retryafter.pytest_plugin import RETRYAFTER_START

        def test_wiring(retryafter_clock, retryafter_adapter, retryafter_session):
            assert isinstance(retryafter_clock, FakeClock)
            assert retryafter_clock.time() == RETRYAFTER_START == 1_700_000_000
            assert isinstance(retryafter_adapter, RetryAfterAdapter)
            assert retryafter_adapter.clock is retryafter_clock
            assert retryafter_adapter.policy == Policy()
            assert isinstance(retryafter_adapter.store, MemoryStore)
            assert isinstance(retryafter_session, requests.Session)
            assert retryafter_session.get_adapter("http://x.test/") is retryafter_adapter
            assert retryafter_session.get_adapter("https://x.test/") is retryafter_adapter

        def test_first_learns(retryafter_session, rate_limited_server):
            server = rate_limited_server(port=0)
            for i in range(11):
                retryafter_session.get(f"{server.url}/{i}", timeout=5)
            assert server.rejected == 1

        def test_next_starts_afresh(retryafter_clock, retryafter_adapter):
            assert retryafter_clock.sleeps == []
            assert list(retryafter_adapter.store.items()) == []
        """
    )
    run().assert_outcomes(passed=3)
    assert not (tmp_path / "state.json").exists()


def test_servers_share_the_clock_and_stop_after_the_test(
    pytester: pytest.Pytester, run: Any
) -> None:
    urls = pytester.path / "urls.txt"
    pytester.makepyfile(
        f"""
        from requests_retryafter import FakeClock
        from requests_retryafter.testing import SlidingWindow, TokenBucket

        def test_two_servers(rate_limited_server, retryafter_clock):
            first = rate_limited_server(SlidingWindow(2, 10), "constant", constant=7)
            other = rate_limited_server(TokenBucket(1, 1), clock=FakeClock(start=0))
            assert first.clock is retryafter_clock
            assert other.clock is not retryafter_clock
            assert first.host != other.host
            with open({str(urls)!r}, "w") as out:
                out.write(first.url + "\\n" + other.url)
        """
    )
    run().assert_outcomes(passed=1)
    for url in urls.read_text().split():
        with pytest.raises(requests.ConnectionError):
            requests.get(url, timeout=5)


def test_the_policy_can_be_overridden(pytester: pytest.Pytester, run: Any) -> None:
    pytester.makeconftest(
        """
        import pytest

        from requests_retryafter import Policy

        @pytest.fixture
        def retryafter_policy():
            return Policy(max_attempts=2, deadline=30)
        """
    )
    pytester.makepyfile(
        """
        import pytest

        from requests_retryafter import RetryLimitExceeded
        from requests_retryafter.testing import FixedWindow

        def test_gives_up(retryafter_session, rate_limited_server, retryafter_adapter):
            assert retryafter_adapter.policy.max_attempts == 2
            server = rate_limited_server(FixedWindow(1, 3600), "zero")
            retryafter_session.get(server.url, timeout=5)
            with pytest.raises(RetryLimitExceeded):
                retryafter_session.get(server.url, timeout=5)
            assert server.requests == 3
        """
    )
    run().assert_outcomes(passed=1)


def test_the_fixtures_are_listed(pytester: pytest.Pytester, run: Any) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run("--fixtures")
    names: List[str] = [
        "retryafter_clock",
        "retryafter_policy",
        "retryafter_adapter",
        "retryafter_session",
        "rate_limited_server",
    ]
    listed = {line.split(" ")[0] for line in result.stdout.lines}
    assert set(names) <= listed
    result.stdout.fnmatch_lines(["*fixtures defined from requests_retryafter.pytest_plugin*"])


def _installed_entry_point() -> bool:
    found: Any = entry_points()
    group = (
        found.select(group="pytest11") if hasattr(found, "select") else found.get("pytest11", [])
    )
    return any(ep.name == "requests_retryafter" and ep.value == PLUGIN for ep in group)


@pytest.mark.skipif(
    not _installed_entry_point(),
    reason="the pytest11 entry point is not installed (setup.cfg entry_points)",
)
def test_the_installed_plugin_loads_on_its_own(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(
        """
        def test_clock(retryafter_clock):
            assert retryafter_clock.sleeps == []
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
