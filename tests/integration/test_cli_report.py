"""``requests-retryafter report`` on real stores: table, JSON and a self-contained HTML page."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time

import pytest

from requests_retryafter import HostState, LimitEstimate, Observation, cli, open_store

NOW = time.time()


def learned(host: str, category: str = "truthful", **kw) -> HostState:
    fields = {
        "category": category,
        "evidence": f"{category} evidence",
        "observations": (
            Observation(at=NOW - 120, status=429, header=30.0, recovered=31.0, served=40),
            Observation(at=NOW - 60, status=429, header=20.0, recovered=21.5, served=40),
        ),
        "limit": LimitEstimate(rate=40 / 60, window=60.0, updated_at=NOW - 60),
        "limit_history": ((NOW - 120, 0.7), (NOW - 60, 40 / 60)),
        "updated_at": NOW - 60,
        "category_changed_at": NOW - 120,
    }
    fields.update(kw)
    return HostState(host, **fields)


@pytest.fixture(params=["json", "sqlite", "shelve"])
def spec(request, tmp_path, monkeypatch):
    monkeypatch.delenv("REQUESTS_RETRYAFTER_STORE", raising=False)
    suffix = {"json": "hosts.json", "sqlite": "hosts.db", "shelve": "hosts.shelf"}[request.param]
    spec = f"{request.param}://{tmp_path}/{suffix}"
    with open_store(spec) as store:
        store.set("a.example.gov", learned("a.example.gov"))
        store.set(
            "b.example.gov:8443",
            learned(
                "b.example.gov:8443",
                "constant_overstated",
                held_until=NOW + 3600,
                hold_reason="asked for 3 h",
                limit=LimitEstimate(rate=0.2, documented=0.5),
            ),
        )
    return spec


def test_table(spec, capsys):
    assert cli.main(["report", "--store", spec]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["host", "category", "obs"]
    assert lines[1].split()[:4] == ["a.example.gov", "truthful", "2", "40.0"]
    assert lines[2].split()[:5] == [
        "b.example.gov:8443",
        "constant_overstated",
        "2",
        "12.0",
        "30.0",
    ]
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lines[2])


def test_json(spec, capsys):
    assert cli.main(["report", "--store", spec, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    hosts = {h["host"]: h for h in data["hosts"]}
    assert set(hosts) == {"a.example.gov", "b.example.gov:8443"}
    assert hosts["b.example.gov:8443"]["held_until"] == pytest.approx(NOW + 3600)
    assert hosts["b.example.gov:8443"]["hold_reason"] == "asked for 3 h"
    assert hosts["a.example.gov"]["held_until"] is None
    assert hosts["a.example.gov"]["observations"] == 2


def test_html(spec, tmp_path, capsys):
    page_path = tmp_path / "report.html"
    assert cli.main(["report", "--store", spec, "--html", str(page_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"wrote {page_path} (2 hosts)" in captured.err
    page = page_path.read_text(encoding="utf-8")
    assert page.count("<svg") == 4
    assert "<script" not in page
    assert "<link" not in page
    assert "a.example.gov" in page
    assert page.count('<table class="refusals">') == 2
    assert page.count('<polyline class="steps"') == 2
    assert page.count('<line class="documented" data-value="30"') == 1  # b's, 0.5/s
    assert re.search(
        r"<tr><td>hold</td><td>-</td><td>\d{4}-[^<]*Z</td><td>in force</td>"
        r"<td>asked for 3 h</td></tr>",
        page,
    )
    assert "Left out: 1 early estimate from partial windows (42.0/min at " in page


def test_html_and_json_together(spec, tmp_path, capsys):
    assert cli.main(["report", "--store", spec, "--html", str(tmp_path / "r.html"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hosts"]
    assert (tmp_path / "r.html").exists()


def test_store_from_the_environment(spec, monkeypatch, capsys):
    monkeypatch.setenv("REQUESTS_RETRYAFTER_STORE", spec)
    assert cli.main(["report", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hosts"]) == 2


def test_unwritable_html_path_is_a_message_and_exit_1(spec, tmp_path, capsys):
    assert cli.main(["report", "--store", spec, "--html", str(tmp_path / "no" / "r.html")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("requests-retryafter: cannot write")
    assert "Traceback" not in err


def test_module_entry_point(tmp_path):
    spec = f"json://{tmp_path}/hosts.json"
    with open_store(spec) as store:
        store.set("a.example.gov", learned("a.example.gov"))
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "requests_retryafter", "report", "--store", spec, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hosts"][0]["host"] == "a.example.gov"
    bad = subprocess.run(
        [sys.executable, "-m", "requests_retryafter", "report", "--store", "gopher://x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr


CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on this machine")
def test_html_renders_offline_in_headless_chromium(spec, tmp_path):
    page_path = tmp_path / "report.html"
    assert cli.main(["report", "--store", spec, "--html", str(page_path)]) == 0
    done = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom", page_path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("<svg") == 4


def test_a_crawl_of_a_real_host_reports_its_limit_as_steps(
    window_host, make_session, server, tmp_path, capsys
):
    """A fixed window of 40 a minute, first met 20 s into a minute: the first estimate counts
    40 requests in 40 s (60/min). The page leaves it out, says so, and draws 40/min."""
    window_host(allow=40, window=60.0, header=lambda remaining, _: str(math.ceil(remaining)))
    spec = f"json://{tmp_path}/hosts.json"
    session, adapter = make_session(store=spec)
    for i in range(120):
        assert session.get(f"{server.url}/records/{i}", timeout=5).status_code == 200
    adapter.close()
    page_path = tmp_path / "report.html"
    assert cli.main(["report", "--store", spec, "--html", str(page_path)]) == 0
    capsys.readouterr()
    page = page_path.read_text(encoding="utf-8")
    (chart,) = re.findall(r'<svg[^>]*class="limit-chart".*?</svg>', page, flags=re.S)
    assert 'class="steps"' in chart
    assert re.findall(r"<circle[^>]*><title>[^<]*: ([\d.]+)/min</title>", chart) == ["40.0"]
    assert "Left out: 1 early estimate from partial windows (60.0/min at " in page
    assert 'class="refusals"' in page
    assert page.count("<tr><td>20") >= 2  # a row per refusal, each with its UTC time

    assert cli.main(["report", "--store", spec, "--json"]) == 0
    (host,) = json.loads(capsys.readouterr().out)["hosts"]
    assert [round(v, 1) for _, v in host["limit_steps_per_minute"]] == [40.0]
    assert [round(v, 1) for _, v in host["limit_partial_estimates_per_minute"]] == [60.0]
