"""The HTML report opened in a real headless Chromium (driven by Playwright): it renders
without console errors, asks for nothing from the network, and shows its charts and tables.

Needs Debian's ``chromium`` and the ``playwright`` package (``.ci/test`` installs both and sets
``REQUESTS_RETRYAFTER_TEST_BROWSER=1``, under which a missing browser is a failure, not a skip).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import List

import pytest

from requests_retryafter import HostState, LimitEstimate, Observation, cli, open_store

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)
# The flags the machine's closed network needs: no background connections, no first-run work.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None  # type: ignore[assignment]

if sync_playwright is None or CHROMIUM is None:
    if os.environ.get("REQUESTS_RETRYAFTER_TEST_BROWSER"):
        pytest.fail(
            "REQUESTS_RETRYAFTER_TEST_BROWSER is set, but chromium or playwright is missing",
            pytrace=False,
        )
    pytest.skip("needs chromium and playwright", allow_module_level=True)

NOW = time.time()


def hosts() -> List[HostState]:
    learned = HostState(
        "permits.example.gov",
        category="truthful",
        evidence="recoveries matched the header",
        observations=(
            Observation(at=NOW - 300, status=429, header=30.0, recovered=31.0, served=40),
            Observation(at=NOW - 200, status=429, header=20.0, recovered=21.5, served=40),
        ),
        limit=LimitEstimate(rate=40 / 60, window=60.0, burst=40, documented=1.0),
        limit_history=((NOW - 300, 0.5), (NOW - 200, 40 / 60)),
        updated_at=NOW - 200,
    )
    held = HostState(
        "registry.example.org",
        category="constant_overstated",
        held_until=NOW + 3600,
        hold_reason="Retry-After 3600 corroborated",
        updated_at=NOW - 10,
    )
    fresh = HostState("quiet.example.net", updated_at=NOW - 5)
    return [learned, held, fresh]


def test_the_html_report_renders_cleanly_in_headless_chromium(tmp_path):
    spec = f"json://{tmp_path}/hosts.json"
    with open_store(spec) as store:
        for state in hosts():
            store.set(state.host, state)
    page_path = tmp_path / "report.html"
    assert cli.main(["report", "--store", spec, "--html", str(page_path)]) == 0

    problems: List[str] = []
    outside: List[str] = []
    assert sync_playwright is not None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

            def only_the_file(route):  # a self-contained page asks for nothing else
                if route.request.url.startswith("file://"):
                    route.continue_()
                else:
                    outside.append(route.request.url)
                    route.abort()

            page.route("**/*", only_the_file)
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            text = page.inner_text("body")
            charts = page.locator("svg").count()
            tables = page.locator("table").count()
            rows = page.locator("table tr").count()
            box = page.locator("svg").first.bounding_box()
        finally:
            browser.close()

    assert problems == []
    assert outside == []
    for state in hosts():
        assert state.host in text
    assert charts >= 2
    assert tables >= 1
    assert rows >= 1 + len(hosts())
    assert box is not None
    assert box["width"] > 100
    assert box["height"] > 50
