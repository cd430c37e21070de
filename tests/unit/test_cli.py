"""The command line's parsing and messages, and report rendering, in process (no server)."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from typing import List

import pytest

from requests_retryafter import Decision, HostState, LimitEstimate, Observation, Search, cli
from requests_retryafter.report import (
    format_epoch,
    line_svg,
    render_html,
    render_json,
    render_table,
    scatter_svg,
    summarize,
)

NOW = 1_700_000_000.0


def state(**kw) -> HostState:
    defaults = {
        "host": "data.example.gov",
        "category": "constant_overstated",
        "evidence": "header always 3600 s but the host recovered in 25 s or less (3 times)",
        "observations": (
            Observation(at=NOW - 900, status=429, header=3600.0, recovered=25.0),
            Observation(at=NOW - 600, status=429, header=3600.0, recovered=21.0),
            Observation(at=NOW - 300, status=503, header=None, recovered=40.0),
        ),
        "limit": LimitEstimate(rate=40 / 60, window=60.0, documented=1.0, updated_at=NOW - 300),
        "limit_history": ((NOW - 900, 0.8), (NOW - 600, 0.7), (NOW - 300, 40 / 60)),
        "updated_at": NOW - 300,
        "category_changed_at": NOW - 600,
    }
    defaults.update(kw)
    return HostState(**defaults)


# -- the parser -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["demo"], ["report"], ["run"], ["get"]])
def test_help_everywhere(command, capsys):
    assert cli.main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: requests-retryafter")


def test_no_command_prints_help_to_stderr_and_exits_2(capsys):
    assert cli.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage:" in captured.err
    assert "demo" in captured.err


def test_unknown_command_is_a_usage_error(capsys):
    assert cli.main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err
    assert "Traceback" not in err


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("requests-retryafter ")


def test_bad_option_value_is_a_usage_error(capsys):
    assert cli.main(["demo", "--urls", "many"]) == 2
    assert "invalid int value" in capsys.readouterr().err


# -- run's hand-made parsing -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "store", "verbose", "module", "rest"),
    [
        (["run", "job.py"], None, False, None, ["job.py"]),
        (
            ["run", "job.py", "-v", "--store", "x"],
            None,
            False,
            None,
            ["job.py", "-v", "--store", "x"],
        ),
        (
            ["run", "-v", "--store", "json:///s", "job.py", "a"],
            "json:///s",
            True,
            None,
            ["job.py", "a"],
        ),
        (["run", "--store=memory://", "--", "-odd.py"], "memory://", False, None, ["-odd.py"]),
        (["run", "-m", "pkg.mod", "-v", "x"], None, False, "pkg.mod", ["-v", "x"]),
        (["run", "-mpkg", "--flag"], None, False, "pkg", ["--flag"]),
    ],
)
def test_run_options_stop_at_the_script(argv, store, verbose, module, rest):
    ns = cli._split_run(argv)
    assert ns is not None
    assert (ns.store, ns.verbose, ns.module, ns.argv) == (store, verbose, module, rest)


def test_run_unknown_option_is_a_usage_error(capsys):
    assert cli.main(["run", "--bogus", "job.py"]) == 2
    assert "unknown option '--bogus'" in capsys.readouterr().err


def test_run_option_without_value(capsys):
    assert cli.main(["run", "--store"]) == 2
    assert "--store needs a value" in capsys.readouterr().err


def test_run_without_a_script(capsys):
    assert cli.main(["run"]) == 2
    assert "give a script" in capsys.readouterr().err


# -- store errors ----------------------------------------------------------------------------


def test_report_without_a_store_says_how_to_give_one(capsys, monkeypatch):
    monkeypatch.delenv("REQUESTS_RETRYAFTER_STORE", raising=False)
    assert cli.main(["report"]) == 2
    err = capsys.readouterr().err
    assert "--store SPEC" in err
    assert "REQUESTS_RETRYAFTER_STORE" in err


@pytest.mark.parametrize("spec", ["no-scheme", "gopher://x"])
def test_bad_store_spec_is_a_message_and_exit_2(spec, capsys):
    assert cli.main(["report", "--store", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith("requests-retryafter: bad store spec")
    assert "Traceback" not in err


def test_bad_store_spec_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("REQUESTS_RETRYAFTER_STORE", "gopher://x")
    assert cli.main(["report"]) == 2
    assert "unknown store scheme" in capsys.readouterr().err


def test_memory_store_report_is_empty(capsys):
    assert cli.main(["report", "--store", "memory://"]) == 0
    assert capsys.readouterr().out == "no hosts in the store\n"


# -- decisions as text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "text"),
    [
        (
            Decision("sleep", "h", 2.0, "Retry-After 2 obeyed", status=429, attempt=1),
            "* h: 429 on attempt 1; sleeping 2.0 s: Retry-After 2 obeyed",
        ),
        (
            Decision("sleep", "h", 0.5, "ConnectionError; own backoff", attempt=2),
            "* h: attempt 2 failed; sleeping 0.5 s: ConnectionError; own backoff",
        ),
        (
            Decision("wait", "h", 1.5, "pacing", attempt=0),
            "* h: waiting 1.5 s before attempt 1: pacing",
        ),
        (
            Decision("hold", "h", 400, "too long", until=NOW),
            "* h: held until 2023-11-14T22:13:20Z: too long",
        ),
        (
            Decision("category", "h", reason="category unknown -> truthful: 3 matched"),
            "* h: category unknown -> truthful: 3 matched",
        ),
        (Decision("give_up", "h", 3, "all 6 attempts used"), "* h: give up: all 6 attempts used"),
        (Decision("ignore", "h", reason="on a 200"), "* h: ignore: on a 200"),
    ],
)
def test_format_decision(decision, text):
    assert cli.format_decision(decision) == text


def test_path_only_hides_the_query_and_userinfo():
    assert cli._path_only("https://u:p@h.example/a/b?token=s3cret") == "/a/b?token=***"
    assert cli._path_only("http://h.example") == "/"
    assert cli._path_only("u:p@h.example/x?k=v#f") == "/x?k=***#***"


def test_connection_reason_keeps_the_errno_and_drops_the_url():
    exc = OSError(
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
        '/x?token=1 (Caused by NewConnectionError("<urllib3.connection.HTTPConnection>: '
        'Failed to establish a new connection: [Errno 111] Connection refused"))'
    )
    assert cli._reason(exc) == "[Errno 111] Connection refused"
    assert cli._reason(ValueError("odd")) == "ValueError"


def test_exit_code_follows_sys_exit(capsys):
    assert cli._exit_code(None) == 0
    assert cli._exit_code(3) == 3
    assert cli._exit_code("bad input") == 1
    assert capsys.readouterr().err == "bad input\n"


def test_waits_summary_groups_reasons():
    from requests_retryafter import demo

    decisions = [
        Decision("sleep", "h", 30, "Retry-After 30 obeyed", status=429, code="header_obeyed"),
        Decision("sleep", "h", 20, "Retry-After 20 obeyed", status=429, code="header_obeyed"),
        Decision("sleep", "h", 1, "no usable Retry-After (absent); own backoff", status=429),
        Decision("wait", "h", 1.5, "pacing below the host's learned limit", code="pacing"),
        Decision("give_up", "h", 0, "all 6 attempts used", code="attempts"),
    ]
    lines = demo._waits_summary(decisions, 52.5)
    assert lines[0] == "52 s in all: 51 s decided after 3 rejections, 2 s in 1 pacing wait"
    assert re.search(r"2 x\s+25\.0 s avg  e\.g\. Retry-After 20 obeyed$", lines[1])
    assert lines[2].endswith("1 x    1.0 s avg  no usable Retry-After (absent); own backoff")
    assert lines[-1].strip() == "give up x 1: all 6 attempts used"


def test_waits_summary_goes_by_codes_not_reason_text():
    """A reason's words may change; the summary counts by code (a wait whose reason says
    "pacing" but whose code is another call's refusal is no pacing wait)."""
    from requests_retryafter import demo

    decisions = [
        Decision("wait", "h", 4, "pacing? no: another call's rejection", code="shared_wait"),
        Decision("wait", "h", 2, "spread evenly", code="pacing"),
    ]
    lines = demo._waits_summary(decisions, 6)
    assert lines[0] == (
        "6 s in all: 0 s decided after 0 rejections, 2 s in 1 pacing wait, "
        "4 s waiting for other calls' refusals"
    )


def test_format_summary():
    from requests_retryafter import HostSummary

    line = cli.format_summary(
        HostSummary("h:1", calls=2, requests=3, refusals=1, waits=2, waited=7.25, holds=1)
    )
    assert line == "h:1: 3 requests, 1 refusal, 2 waits (7.2 s), 1 hold, 0 give-ups"


# -- report rendering ---------------------------------------------------------------------------


def test_format_epoch():
    assert format_epoch(NOW) == "2023-11-14T22:13:20Z"
    assert format_epoch(0) == "-"
    assert format_epoch(float("inf")) == "-"
    assert format_epoch(1e20) == "-"


def test_summary_shows_only_current_holds():
    held = state(held_until=NOW + 60, hold_reason="asked for 3 h")
    assert summarize(held, now=NOW).held_until == NOW + 60
    assert summarize(held, now=NOW).hold_reason == "asked for 3 h"
    ended = summarize(held, now=NOW + 61)
    assert (ended.held_until, ended.hold_reason) == (0.0, "")


def test_table_lists_limit_against_documented():
    text = render_table([("data.example.gov", state())], now=NOW)
    header, row = text.splitlines()
    assert header.split() == [
        "host",
        "category",
        "obs",
        "limit/min",
        "documented/min",
        "pace/min",
        "held",
        "until",
        "last",
        "change",
    ]
    assert row.split()[:6] == ["data.example.gov", "constant_overstated", "3", "40.0", "60.0", "-"]
    assert "2023-11-14T22:08:20Z" in row


def test_the_even_pace_kept_is_shown_with_what_set_it():
    # The workers' shared search (their rate together) comes first; else the even pace a
    # trial kept for a client alone; else nothing.
    search = Search(rate=9.5, held=9.5, ceiling=10.0, since=NOW - 60)
    shared = state(search=search, even_pace=(4.0, 6.0))
    kept = state(host="b.example", even_pace=(4.0, 6.0))
    assert summarize(shared, now=NOW).pace_per_minute == pytest.approx(570.0)
    assert summarize(shared, now=NOW).pace_source == "shared search"
    assert summarize(kept, now=NOW).pace_per_minute == pytest.approx(240.0)
    assert summarize(state(), now=NOW).pace_per_minute is None
    rows = render_table([("a", shared), ("b", kept)], now=NOW).splitlines()
    assert "570.0 (shared search)" in rows[1]
    assert "240.0 (kept trial)" in rows[2]
    hosts = {h["host"]: h for h in json.loads(render_json([("a", shared)], now=NOW))["hosts"]}
    assert hosts["data.example.gov"]["pace_per_minute"] == pytest.approx(570.0)
    assert hosts["data.example.gov"]["pace_source"] == "shared search"
    assert "570.0 requests/min (shared search)" in render_html([("a", shared)], now=NOW)


def test_how_the_learned_limit_is_paced_is_said_in_words():
    window = LimitEstimate(rate=100 / 60, window=60.0, burst=100, anchor=NOW - 120, shortest=55.0)
    counter = LimitEstimate(
        rate=12 / 10, window=10.0, burst=12, even=True, held=11, peak=1.5, shortest=8.5
    )
    assert summarize(state(limit=window), now=NOW).pacing == (
        "100 requests per 60.0 s, sent at each window's start, its windows located on the "
        "clock; the window is being narrowed: no shorter than 55.0 s"
    )
    said = summarize(state(limit=counter), now=NOW).pacing
    assert said.startswith("12 requests per 10.0 s, spread evenly")
    assert "narrowed" not in said  # an even pace has no window to narrow
    assert "a refusal goes back to 11 a window" in said
    assert "90.0 requests/min before the last cut" in said
    assert summarize(state(limit=None), now=NOW).pacing == ""
    opened = LimitEstimate(rate=100 / 60, window=60.0, burst=100, even=True, opening=100)
    assert summarize(state(limit=opened), now=NOW).pacing.endswith(
        "; a run's first 100 requests at once (the host let them through when idle), the "
        "next at the turn of the window they opened or the clock's"
    )
    haproxy = dataclasses.replace(opened, opening_clock=False)
    assert summarize(state(limit=haproxy), now=NOW).pacing.endswith("the window they opened")
    hosts = json.loads(render_json([("a", state(limit=counter))], now=NOW))["hosts"]
    assert hosts[0]["pacing"] == said
    assert (
        json.loads(render_json([("a", state(limit=None))], now=NOW))["hosts"][0]["pacing"] is None
    )
    assert "spread evenly (a token bucket" in render_html([("a", state(limit=counter))], now=NOW)
    refuted = state(limit=None, stated_refuted=True, stated_refuted_at=NOW - 60)
    assert summarize(refuted, now=NOW).pacing.startswith(
        "its answers saying none of its window remains are not waited for"
    )
    search = Search(rate=10.0, held=9.5, ceiling=10.5, since=NOW - 60)
    shared = summarize(state(limit=None, search=search), now=NOW).pacing
    assert shared == (
        "the workers' shared search: 570.0 requests/min held, 630.0 refused, 600.0 on trial"
    )
    lower = summarize(state(search=Search(rate=2.0, held=2.0, lower=True)), now=NOW).pacing
    assert lower.endswith(
        "the workers' shared search: 120.0 requests/min held (a lower bound, doubled until refused)"
    )


def test_table_marks_stated_limits_and_missing_ones():
    stated = state(limit=LimitEstimate(rate=2.0, source="stated"))
    bare = state(host="a.example", limit=None, observations=())
    rows = render_table([("z", stated), ("a.example", bare)], now=NOW).splitlines()[1:]
    assert rows[0].startswith("a.example")  # sorted by host
    assert " - " in rows[0]
    assert "120.0 (stated)" in rows[1]


def test_json_has_summary_and_full_state():
    data = json.loads(render_json([("data.example.gov", state())], now=NOW))
    assert data["generated_at"] == NOW
    (host,) = data["hosts"]
    assert host["host"] == "data.example.gov"
    assert host["observations"] == 3
    assert host["limit_per_minute"] == 40.0
    assert host["documented_per_minute"] == 60.0
    assert host["held_until"] is None
    assert host["updated_at_utc"] == "2023-11-14T22:08:20Z"
    assert HostState.from_dict(host["state"]) == state()


def _svgs(page: str) -> List[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", page, flags=re.S)]


def test_html_is_self_contained_with_two_charts_per_host():
    page = render_html(
        [("data.example.gov", state()), ("b.example", state(host="b.example"))], now=NOW
    )
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "<link" not in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    svgs = _svgs(page)  # each chart is well-formed XML
    assert len(svgs) == 4
    ns = "{http://www.w3.org/2000/svg}"
    scatter, line = svgs[0], svgs[1]
    assert len(scatter.findall(f"{ns}circle")) == 2  # the 503 without a header is not plotted
    assert "1 rejection not plotted" in page
    assert line.find(f"{ns}polyline") is not None
    assert len(line.findall(f"{ns}circle")) == 3
    assert "documented 60.0/min" in page


def test_html_escapes_what_came_from_the_store():
    evil = state(
        host="<b>h</b>",
        evidence='<script>alert("x")</script>',
        hold_reason="&",
        held_until=NOW + 10,
    )
    page = render_html([("<b>h</b>", evil)], now=NOW, title="a <report>")
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "&lt;b&gt;h&lt;/b&gt;" in page
    assert "<title>a &lt;report&gt;</title>" in page


def test_html_for_a_host_with_nothing_learned():
    bare = HostState("new.example")
    assert scatter_svg(bare) == ("", "No rejection observed yet.")
    assert line_svg(bare) == ("", "No limit learned yet.")
    page = render_html([("new.example", bare)], now=NOW)
    assert "No rejection observed yet." in page
    assert _svgs(page) == []


def test_html_without_hosts():
    assert "No hosts in the store." in render_html([], now=NOW)


def test_line_chart_with_one_point_and_zero_headers():
    one = state(
        limit_history=((NOW, 0.5),),
        limit=LimitEstimate(rate=0.5),
        observations=(Observation(at=NOW, status=429, header=0.0, recovered=30.0),),
    )
    svg, _ = line_svg(one)
    assert len(_svgs(svg)) == 1
    svg, note = scatter_svg(one)
    assert note == ""
    ET.fromstring(svg)


def test_every_option_is_on_the_cli_page():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = cli.build_parser()
    (subparsers,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    for name, sub in subparsers.choices.items():
        assert f"## {name}" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in page, f"{name} {option}"


def test_charts_with_extreme_values():
    flat = state(limit_history=((NOW, 0.0), (NOW + 60, 0.0)), limit=LimitEstimate(rate=0.0))
    svg, _ = line_svg(flat)
    ET.fromstring(svg)
    huge = state(observations=(Observation(at=NOW, status=429, header=86400.0, recovered=5.0),))
    svg, _ = scatter_svg(huge)
    labels = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert "100000" in labels  # the axis reaches past the largest value


@pytest.mark.parametrize(
    ("span", "step"), [(1.0, 0.5), (69.0, 20.0), (100.0, 50.0), (0.0, 5e-10), (7.5, 2.0)]
)
def test_nice_steps(span, step):
    from requests_retryafter.report import _nice_step

    assert _nice_step(span) == pytest.approx(step)


def test_plain_progress_prints_a_finished_portal_once(tmp_path):
    # A slow machine: the periodic update (every 2 s) comes after a portal finished; its
    # "done" line must not be printed again.
    import io
    import types

    from requests_retryafter import FakeClock, MemoryStore, demo

    portal = types.SimpleNamespace(stats=types.SimpleNamespace(rejected=0))
    runs = [
        demo._HostRun("a", "", "", None, None, portal, demo._DemoClock(0.0, 0.0), 1),
        demo._HostRun("b", "", "", None, None, portal, demo._DemoClock(0.0, 0.0), 1),
    ]
    assert isinstance(runs[0].clock, FakeClock)
    out = io.StringIO()
    progress = demo._PlainProgress(runs, MemoryStore(), out)
    runs[0].done = True
    progress.update()
    progress.last -= 3.0  # the next update is a periodic one
    progress.update()
    runs[1].done = True
    progress.close()
    done_lines = [line for line in out.getvalue().splitlines() if line.endswith("done")]
    assert [line.split()[2] for line in done_lines] == ["a", "b"]
