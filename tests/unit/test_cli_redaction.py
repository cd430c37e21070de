"""Issue #9 in the command line, in process: redaction by rule, the library's warnings on
stderr, and reports of stored numbers no calendar or chart can show."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import xml.etree.ElementTree as ET
from typing import List

import pytest

from requests_retryafter import Decision, HostState, LimitEstimate, Observation, cli
from requests_retryafter.report import (
    format_epoch,
    line_svg,
    render_html,
    render_json,
    render_table,
    scatter_svg,
)

NOW = 1_700_000_000.0


# -- redaction, by rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example.org/v1/items", "https://api.example.org/v1/items"),
        ("http://h.example:8080/", "http://h.example:8080/"),
        ("https://user:pw@h.example/x", "https://***@h.example/x"),
        ("https://TOKEN123@h.example/x", "https://***@h.example/x"),
        ("https://u:p%40ss@h.example/x", "https://***@h.example/x"),
        ("https://u:p@ss@h.example/x", "https://***@h.example/x"),  # "@" in the password
        ("http://u:p/ss@h.example/x", "http://***@h.example/x"),  # "/" in the password
        ("https://h.example/x?token=abc&page=2", "https://h.example/x?token=***&page=***"),
        ("https://h.example/x?abc123secret", "https://h.example/x?***"),
        ("https://h.example/x?a=1;b=2", "https://h.example/x?a=***;b=***"),
        ("https://h.example/x?=v&&k=", "https://h.example/x?***&&k=***"),
        ("https://h.example/x#access_token=abc", "https://h.example/x#***"),
        ("https://h.example/x#", "https://h.example/x#"),
        ("https://h.example/x?", "https://h.example/x?"),
        ("https://h.example/app;jsessionid=ABC/p", "https://h.example/app;jsessionid=***/p"),
        ("user:pass@h.example/x?k=v", "***@h.example/x?k=***"),
        ("h.example/v1?key=abc", "h.example/v1?key=***"),
        ("/x?token=s3", "/x?token=***"),
        ("redis://:pw@r.example:6379/0", "redis://***@r.example:6379/0"),
        ("json:///var/lib/hosts.json", "json:///var/lib/hosts.json"),
        ("http://[::1", "http://[::1"),
        ("http://u:p@[::1]:8/x?q=1#f", "http://***@[::1]:8/x?q=***#***"),
        ("", ""),
    ],
)
def test_redact_url(url, shown):
    assert cli.redact_url(url) == shown


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("Authorization", "Bearer s3cret", "***"),
        ("authorization", "Basic dTpw", "***"),
        ("Proxy-Authorization", "Basic dTpw", "***"),
        ("Cookie", "sid=abc", "***"),
        ("Set-Cookie", "sid=abc; HttpOnly", "***"),
        ("X-Api-Key", "k-123", "***"),
        ("Api-Key", "k-123", "***"),
        ("apikey", "k-123", "***"),
        ("X-Auth-Token", "t-123", "***"),
        ("X-Amz-Security-Token", "FwoGZXIvYXdzE", "***"),
        ("X-Goog-Api-Key", "AIza", "***"),
        ("Private-Token", "glpat-x", "***"),
        ("X-CSRFToken", "c", "***"),
        ("X-XSRF-TOKEN", "c", "***"),
        ("X-Hub-Signature-256", "sha256=ab", "***"),
        ("X-Client-Secret", "s", "***"),
        ("X-Password", "p", "***"),
        ("X-Passwd", "p", "***"),
        ("X-Session-Id", "s", "***"),
        ("X_Session_Id", "s", "***"),
        ("X-Amz-Credential", "AKIA/2024", "***"),
        ("DPoP", "eyJhbGciOi.x.y", "***"),
        ("WWW-Authenticate", 'Bearer realm="x"', "***"),
        ("X-Custom", "Bearer s3cret", "***"),  # the value says what it is
        ("X-Custom", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "***"),
        ("Accept", "*/*", "*/*"),
        ("Content-Type", "application/json", "application/json"),
        ("Retry-After", "30", "30"),
        (
            "Location",
            "https://u:p@h.example/next?token=t#f",
            "https://***@h.example/next?token=***#***",
        ),
        (
            "Link",
            '<https://h.example/x?page=2>; rel="next"',
            '<https://h.example/x?page=***>; rel="next"',
        ),
    ],
)
def test_redact_header(name, value, shown):
    assert cli.redact_header(name, value) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
            "/x?token=s3 (Caused by NewConnectionError(...))",
            "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
            "/x?token=*** (Caused by NewConnectionError(...))",
        ),
        (
            "No connection adapters were found for 'user:pass@h.example/x?t=1'",
            "No connection adapters were found for '***@h.example/x?t=***'",
        ),
        (
            "Invalid URL 'ftp://u:p@h/x#frag': whatever",
            "Invalid URL 'ftp://***@h/x#***': whatever",
        ),
        ("redis://:hunter2@r:6379/0 refused", "redis://***@r:6379/0 refused"),
        ("all 6 attempts used; own backoff", "all 6 attempts used; own backoff"),
        ("no '?' here? fine.", "no '?' here? fine."),
    ],
)
def test_redact_text(text, shown):
    assert cli.redact_text(text) == shown


def test_redact_text_scrubs_known_secrets_the_shape_rules_miss():
    secrets = cli._known_secrets(
        "http://alice:p ss@h.example/x?token=t0ken&page=2#frag",
        {"X-Api-Key": "k3y-value", "Authorization": "Bearer s3cret-b", "Accept": "*/*"},
    )
    text = "failed for alice:p ss@h.example with k3y-value and s3cret-b (Bearer) at page 2 */*"
    shown = cli.redact_text(text, secrets)
    for secret in ("p ss", "k3y-value", "s3cret-b", "alice"):
        assert secret not in shown
    assert "Bearer" in shown
    assert "page 2" in shown  # short, plain values are left alone
    assert "*/*" in shown


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://u:p/ss@h.example/x", "h.example"),  # never "u:p"
        ("user:pass@h.example/x", "h.example"),
        ("https://H.example:443/", "h.example"),
        ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
        ("http://", "?"),
    ],
)
def test_display_host_never_shows_userinfo(url, host):
    assert cli._display_host(url) == host


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://u:p@h.example/a/b?token=s3cret", "/a/b?token=***"),
        ("http://h.example", "/"),
        ("u:p@h.example/x?k=v#f", "/x?k=***#***"),
        ("https://h.example?k=v", "/?k=***"),
    ],
)
def test_path_only(url, path):
    assert cli._path_only(url) == path


def test_decisions_are_printed_redacted(capsys):
    show = cli._decision_printer(sys.stderr)
    show(Decision("ignore", "h", reason="Location https://u:p@h/x?token=t0k ignored"))
    err = capsys.readouterr().err
    assert "t0k" not in err
    assert "u:p" not in err
    assert "https://***@h/x?token=***" in err


def test_holds_are_printed_in_iso_8601():
    text = cli.format_decision(Decision("hold", "h", 400, "too long", until=NOW))
    assert text == "* h: held until 2023-11-14T22:13:20Z: too long"


# -- the library's warnings on stderr ----------------------------------------------------------


def _run_as_command(monkeypatch, command):
    """Make ``main()`` run ``command(args)`` as if it were a subcommand."""
    monkeypatch.setattr(cli, "_split_run", lambda argv: argparse.Namespace(func=command))


def test_library_warnings_are_shown_once_and_removed_after(capsys, monkeypatch):
    library = logging.getLogger("requests_retryafter")
    before = list(library.handlers)
    seen: List[List[logging.Handler]] = []

    def command(args):
        logging.getLogger("requests_retryafter.stores").warning(
            "store %s moved aside to %s", "/x/hosts.json", "/x/hosts.json.corrupt-1"
        )
        logging.getLogger("requests_retryafter.stores").info("not shown")
        seen.append([h for h in library.handlers if h not in before])
        if len(seen) == 1:  # a nested main() (a script under "run") adds no second handler
            assert cli.main(["again"]) == 0
        return 0

    _run_as_command(monkeypatch, command)
    assert cli.main(["anything"]) == 0
    err = capsys.readouterr().err
    line = (
        "requests-retryafter: warning: store /x/hosts.json moved aside to /x/hosts.json.corrupt-1"
    )
    assert err.count(line) == 2  # one per record, never twice for one
    assert "not shown" not in err
    assert len(seen[0]) == 1
    assert seen[1] == seen[0]
    assert library.handlers == before  # removed on exit
    seen.clear()
    assert cli.main(["anything"]) == 0  # a second call in the same process: same output
    assert capsys.readouterr().err.count(line) == 2
    assert library.handlers == before


def test_library_warnings_are_redacted(capsys, monkeypatch):
    def command(args):
        logging.getLogger("requests_retryafter.stores").warning(
            "redis store %s unavailable", "redis://:hunter2@r.example:6379/0"
        )
        return 0

    _run_as_command(monkeypatch, command)
    assert cli.main(["x"]) == 0
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "redis://***@r.example:6379/0" in err


def test_an_unexpected_error_is_one_redacted_line(capsys, monkeypatch):
    def command(args):
        raise RuntimeError("boom at https://u:pw@h.example/x?token=t0ken")

    _run_as_command(monkeypatch, command)
    assert cli.main(["x"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "t0ken" not in err
    assert "pw@" not in err
    assert err.startswith("requests-retryafter: internal error")


def test_error_messages_are_redacted(capsys, monkeypatch):
    def command(args):
        raise cli.CliError("cannot open the store: redis://:hunter2@r.example/0: refused")

    _run_as_command(monkeypatch, command)
    assert cli.main(["x"]) == 1
    assert "hunter2" not in capsys.readouterr().err


# -- report on values no calendar or chart can show ------------------------------------------

#: Values a damaged (or hostile) store may hold, that a report must survive in every format.
ODD_NUMBERS = [
    float("nan"),
    float("inf"),
    float("-inf"),
    1e-310,
    1e308,
    -1e308,
    1e300,
    -1.0,
    0.0,
]


def good_state(host: str = "data.example.gov") -> HostState:
    return HostState(
        host,
        category="truthful",
        observations=(Observation(at=NOW - 60, status=429, header=30.0, recovered=31.0),),
        limit=LimitEstimate(rate=40 / 60, window=60.0, documented=1.0, updated_at=NOW - 60),
        limit_history=((NOW - 120, 0.7), (NOW - 60, 40 / 60)),
        updated_at=NOW - 60,
    )


def odd_state(value: float) -> HostState:
    """A state built directly (no loader to sanitise it) with ``value`` in every number."""
    return HostState(
        "odd.example",
        category="truthful",
        observations=(
            Observation(
                at=value, status=429, header=value, recovered=value, failed_until=value, span=value
            ),
            Observation(at=NOW, status=429, header=30.0, recovered=31.0),
        ),
        limit=LimitEstimate(
            rate=value, window=value, documented=value, updated_at=value, anchor=value
        ),
        limit_history=((value, value), (NOW, value), (value, 1.0), (NOW + 60, 0.5)),
        blocked_until=value,
        held_until=value,
        hold_reason="odd",
        category_changed_at=value,
        updated_at=value,
        workers=(("w", value),),
    )


def _svgs(page: str) -> List[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", page, flags=re.S)]


@pytest.mark.parametrize("value", ODD_NUMBERS, ids=repr)
def test_report_survives_any_stored_number(value):
    items = [("odd.example", odd_state(value)), ("data.example.gov", good_state())]
    text = render_table(items, now=NOW)
    row = next(line for line in text.splitlines() if line.startswith("odd.example"))
    assert "nan" not in row.lower()
    assert "inf" not in row.lower()
    assert max(len(cell) for cell in row.split()) < 40  # no 300-digit cell

    data = json.loads(render_json(items, now=NOW))  # render_json uses allow_nan=False
    json.dumps(data, allow_nan=False)
    odd = next(h for h in data["hosts"] if h["host"] == "odd.example")
    assert odd["observations"] == 2

    page = render_html(items, now=NOW)
    for svg in _svgs(page):  # every chart is still well-formed XML, with real coordinates
        for element in svg.iter():
            for attribute in element.attrib.values():
                assert "nan" not in attribute.lower()
                assert "inf" not in attribute.lower()
    assert "odd.example" in page
    assert "data.example.gov" in page


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_json_report_writes_null_for_non_finite_values(value):
    text = render_json([("odd.example", odd_state(value))], now=NOW)
    assert "NaN" not in text
    assert "Infinity" not in text
    (host,) = json.loads(text)["hosts"]
    assert host["limit_per_minute"] is None
    assert host["updated_at"] is None
    assert host["updated_at_utc"] is None
    assert host["state"]["limit"]["rate"] is None
    assert host["state"]["observations"][0]["header"] is None
    assert host["state"]["held_until"] is None


def test_json_report_of_a_non_finite_now():
    assert json.loads(render_json([], now=float("nan")))["generated_at"] is None


@pytest.mark.parametrize("value", [-1.0, -1e308, 1e300, float("nan"), "soon", None, True], ids=repr)
def test_format_epoch_of_what_is_no_time(value):
    assert format_epoch(value) == "-"


def test_format_epoch_is_iso_8601_utc():
    assert format_epoch(NOW) == "2023-11-14T22:13:20Z"
    assert format_epoch(1_796_117_400) == "2026-12-01T09:30:00Z"


def test_charts_leave_out_values_out_of_range_and_say_so():
    svg, note = scatter_svg(odd_state(float("inf")))
    assert "1 rejection not plotted" in note
    assert len(_svgs(svg)) == 1
    svg, note = line_svg(odd_state(float("nan")))
    assert "3 points out of range not plotted" in note
    assert len(_svgs(svg)) == 1
    nothing = HostState("h", limit_history=((float("nan"), 1.0),))
    assert line_svg(nothing) == ("", "No limit to plot: 1 point out of range.")
