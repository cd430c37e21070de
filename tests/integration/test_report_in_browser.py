"""The HTML report opened in a real headless Chromium (driven by Playwright): it renders
without console errors, asks for nothing from the network, and shows its charts and tables.

Needs Debian's ``chromium`` and the ``playwright`` package (``.ci/test`` installs both and sets
``REQUESTS_RETRYAFTER_TEST_BROWSER=1``, under which a missing browser is a failure, not a skip).
"""

from __future__ import annotations

import os
import re
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
            Observation(at=NOW - 300, status=429, header=13.0, recovered=13.0, served=40),
            Observation(at=NOW - 200, status=429, header=20.0, recovered=21.5, served=40),
        ),
        # The first estimate counted 40 requests in 13 s (a partial window): 180/min, left out.
        limit=LimitEstimate(rate=40 / 60, window=60.0, burst=40, documented=1.0),
        limit_history=((NOW - 287, 3.0), (NOW - 227, 0.5), (NOW - 178.5, 40 / 60)),
        updated_at=NOW - 100,
    )
    held = HostState(
        "registry.example.org",
        category="constant_overstated",
        held_until=NOW + 3600,
        held_since=NOW - 10,
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
            learned = page.locator("section", has_text="permits.example.gov")
            chart = learned.locator("svg.limit-chart")
            steps = chart.locator("polyline.steps")
            corners = steps.get_attribute("points") or ""
            plot = chart.locator("rect.plot").bounding_box()
            steps_box = steps.bounding_box()
            documented = chart.locator("line.documented")
            documented_box = documented.bounding_box()
            dash = documented.evaluate("e => getComputedStyle(e).strokeDasharray")
            caption = learned.locator(".chart:has(svg.limit-chart) p.note").inner_text()
            refusal_rows = learned.locator("table.refusals tbody tr").all_inner_texts()
            held_rows = (
                page.locator("section", has_text="registry.example.org")
                .locator("table.holds tbody tr")
                .all_inner_texts()
            )
            empty = page.locator("section", has_text="quiet.example.net").locator("p.empty")
            empty_notes = [n for n in empty.all_inner_texts() if n.strip()]
            empty_visible = all(empty.nth(i).is_visible() for i in range(empty.count()))
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

    # The learned limit as steps: every segment horizontal or vertical, in turn.
    points = [tuple(map(float, p.split(","))) for p in corners.split()]
    assert len(points) == 4  # 30 then 40/min (the 180/min first estimate left out), to the edge
    for i, ((x0, y0), (x1, y1)) in enumerate(zip(points, points[1:])):
        assert (y0 == y1) if i % 2 == 0 else (x0 == x1)
    # Scaled to what is drawn: the steps (30 and 40/min) fill a good part of the plot, and the
    # documented 60/min, dashed, lies above them, inside it.
    assert plot is not None
    assert steps_box is not None
    assert documented_box is not None
    assert steps_box["height"] > 0.1 * plot["height"]
    assert steps_box["y"] < plot["y"] + 0.6 * plot["height"]
    assert plot["y"] < documented_box["y"] < steps_box["y"]
    assert documented_box["width"] == pytest.approx(plot["width"], abs=2)
    assert dash not in ("", "none")
    assert "Left out: 1 early estimate from partial windows (180.0/min at " in caption
    assert "Dashed: the documented limit, 60.0/min." in caption
    # The tables, per host; and a sentence for each empty chart and table.
    assert len(refusal_rows) == 2
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+429", r) for r in refusal_rows)
    assert len(held_rows) == 1
    assert "in force" in held_rows[0]
    assert "Retry-After 3600 corroborated" in held_rows[0]
    assert empty_visible
    assert empty_notes[:4] == [
        "No rejection observed yet. Nothing to chart.",
        "No limit learned yet. Nothing to chart.",
        "No refusals seen yet: nothing to list.",
        "No hold or shared wait on record for this host.",
    ]
    assert "not each wait or give-up" in empty_notes[4]
