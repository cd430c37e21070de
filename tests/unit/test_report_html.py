"""The HTML report's content: the learned limit as steps without partial-window first
estimates, the documented limit dashed, per-host tables of refusals, holds and waits, a
sentence for every empty chart or table, and real UTC times (rendered in process)."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from requests_retryafter import Decision, HostState, LimitEstimate, Observation
from requests_retryafter.report import (
    limit_steps,
    line_svg,
    render_html,
    render_json,
    render_table,
)

NOW = 1_700_000_000.0
SVG = "{http://www.w3.org/2000/svg}"


def host(
    history: Sequence[Tuple[float, float]],
    *,
    window: Optional[float] = 60.0,
    first_refusal: Optional[float] = 0.0,
    documented: Optional[float] = None,
    **kw,
) -> HostState:
    """A host whose limit history is ``(seconds after NOW, requests per minute)`` points."""
    observations = ()
    if first_refusal is not None:
        observations = (
            Observation(at=NOW + first_refusal, status=429, header=None, recovered=13.0),
        )
    last = history[-1][1] / 60.0 if history else 1.0
    fields = {
        "category": "absent",
        "observations": observations,
        "limit": LimitEstimate(
            rate=last,
            window=window,
            documented=None if documented is None else documented / 60.0,
            updated_at=NOW + (history[-1][0] if history else 0.0),
        ),
        "limit_history": tuple((NOW + t, v / 60.0) for t, v in history),
        "updated_at": NOW + (history[-1][0] if history else 0.0),
    }
    fields.update(kw)
    return HostState("data.example.gov", **fields)


def per_minute(points: Sequence[Tuple[float, float]]) -> List[Tuple[float, float]]:
    return [(round(t - NOW, 3), round(v, 1)) for t, v in points]


# -- which points are partial-window first estimates ---------------------------------------
#
# The histories are those a seeded demo crawl wrote (seconds after the first refusal,
# requests per minute), one per kind of portal.


@pytest.mark.parametrize(
    ("history", "window", "kept", "partial"),
    [
        pytest.param(  # fixed window 40/60 s: the first estimate counted 40 requests in 13 s
            [(13.0, 184.6), (73.0, 40.0)], 60.0, [(73.0, 40.0)], [(13.0, 184.6)], id="truthful"
        ),
        pytest.param(  # 100/60 s: the second estimate came after more than a window: kept
            [(13.2, 794.8), (73.2, 149.0), (145.0, 100.0)],
            60.0,
            [(73.2, 149.0), (145.0, 100.0)],
            [(13.2, 794.8)],
            id="absent",
        ),
        pytest.param(  # 12/60 s: replaced after 100 s, but made 13 s after the first refusal
            [(13.1, 103.7), (112.9, 12.0), (613.1, 12.0)],
            60.0,
            [(112.9, 12.0), (613.1, 12.0)],
            [(13.1, 103.7)],
            id="always-zero",
        ),
        pytest.param(  # a token bucket of 30: each estimate replaced by a lower one 1 s later
            [(1.0, 1800.0), (2.0, 900.0), (3.0, 420.0), (4.0, 180.0), (5.0, 60.0), (14.0, 60.0)],
            1.0,
            [(5.0, 60.0), (14.0, 60.0)],
            [(1.0, 1800.0), (2.0, 900.0), (3.0, 420.0), (4.0, 180.0)],
            id="token-bucket",
        ),
        pytest.param(  # one estimate only: drawn, whatever it is
            [(70.6, 100.0)], 60.0, [(70.6, 100.0)], [], id="single"
        ),
        pytest.param(  # rising estimates are no overestimate: all drawn
            [(13.0, 30.0), (73.0, 40.0)], 60.0, [(13.0, 30.0), (73.0, 40.0)], [], id="rising"
        ),
        pytest.param(  # a lower estimate long after a full window: a real change, drawn
            [(300.0, 60.0), (900.0, 30.0)],
            60.0,
            [(300.0, 60.0), (900.0, 30.0)],
            [],
            id="later-change",
        ),
        pytest.param(  # without a learned window there is no rule to apply
            [(13.0, 184.6), (73.0, 40.0)],
            None,
            [(13.0, 184.6), (73.0, 40.0)],
            [],
            id="no-window",
        ),
    ],
)
def test_partial_window_first_estimates_are_left_out(history, window, kept, partial):
    steps = limit_steps(host(history, window=window))
    assert per_minute(steps.kept) == kept
    assert per_minute(steps.partial) == partial


def test_a_refusal_record_that_rolled_off_does_not_make_old_points_early():
    # The oldest refusal on record is later than the points: it says nothing about them.
    steps = limit_steps(host([(13.0, 184.6), (200.0, 40.0)], first_refusal=150.0))
    assert per_minute(steps.kept) == [(13.0, 184.6), (200.0, 40.0)]


# -- the step chart --------------------------------------------------------------------------


def chart(state: HostState) -> Tuple[ET.Element, str]:
    svg, caption = line_svg(state)
    return ET.fromstring(svg), caption


def plot_box(svg: ET.Element) -> Tuple[float, float]:
    """The plot area's top and bottom y."""
    rect = svg.find(f"{SVG}rect")
    assert rect is not None
    top = float(rect.get("y", "nan"))
    return top, top + float(rect.get("height", "nan"))


def corners(svg: ET.Element) -> List[Tuple[float, float]]:
    line = svg.find(f"{SVG}polyline[@class='steps']")
    assert line is not None
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.get("points", "").split())]


def test_the_limit_is_drawn_as_steps_scaled_to_the_values_drawn():
    svg, caption = chart(host([(13.2, 794.8), (73.2, 149.0), (145.0, 100.0)]))
    points = corners(svg)
    # Steps: each segment is horizontal or vertical, and they alternate.
    segments = list(zip(points, points[1:]))
    assert len(segments) == 3
    for i, ((x0, y0), (x1, y1)) in enumerate(segments):
        if i % 2 == 0:
            assert y0 == y1  # the estimate held...
            assert x1 > x0
        else:
            assert x0 == x1  # ...until a lower one replaced it
            assert y1 > y0
    # Scaled to what is drawn (149/min near the top), not to the left-out 795/min.
    top, bottom = plot_box(svg)
    assert points[0][1] < top + 0.3 * (bottom - top)
    labels = [
        float(t.text or "nan")
        for t in svg.iter(f"{SVG}text")
        if t.get("text-anchor") == "end" and re.fullmatch(r"[\d.]+", t.text or "")
    ]
    assert max(labels) < 300
    assert len(svg.findall(f"{SVG}circle")) == 2
    assert "Left out: 1 early estimate from partial windows (794.8/min at " in caption
    assert "within one window (60 s) of the host's first refusal on record" in caption


def test_the_documented_limit_is_a_dashed_line_at_its_value():
    svg, caption = chart(host([(13.0, 184.6), (73.0, 40.0)], documented=60.0))
    (line,) = svg.findall(f"{SVG}line[@class='documented']")
    assert line.get("stroke-dasharray")
    assert line.get("data-value") == "60"
    assert line.get("y1") == line.get("y2")
    (step,) = {y for _, y in corners(svg)}
    _, bottom = plot_box(svg)
    # 60/min and 40/min on a scale from 0 at the bottom: the line is 1.5 times higher.
    documented_height = bottom - float(line.get("y1", "nan"))
    assert documented_height == pytest.approx(1.5 * (bottom - step), abs=0.2)
    assert "Dashed: the documented limit, 60.0/min." in caption


def test_without_a_documented_limit_the_caption_says_there_is_no_dashed_line():
    svg, caption = chart(host([(13.0, 184.6), (73.0, 40.0)]))
    assert svg.findall(f"{SVG}line[@class='documented']") == []
    assert "No documented limit is known for this host, so no dashed line." in caption
    assert "Dashed:" not in caption


def test_the_newest_step_runs_on_to_the_hosts_last_change():
    state = host([(13.0, 184.6), (73.0, 40.0)], updated_at=NOW + 373.0)
    svg, _ = chart(state)
    points = corners(svg)
    rect = svg.find(f"{SVG}rect")
    assert rect is not None
    right = float(rect.get("x", "nan")) + float(rect.get("width", "nan"))
    assert points[-1][0] == pytest.approx(right, abs=0.1)
    assert points[-1][1] == points[-2][1]
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert "2023-11-14T22:19:33Z" in texts  # NOW + 373 s, the right edge


# -- the page --------------------------------------------------------------------------------


class Tables(HTMLParser):
    """Each table's rows of cell text, by the table's class; and each empty-note's text."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: Dict[str, List[List[str]]] = {}
        self.empty: List[str] = []
        self._table: Optional[str] = None
        self._row: Optional[List[str]] = None
        self._cell: Optional[List[str]] = None
        self._note: Optional[List[str]] = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "table":
            self._table = classes[0] if classes else ""
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "p" and "empty" in classes:
            self._note = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "p" and self._note is not None:
            self.empty.append("".join(self._note))
            self._note = None

    def handle_data(self, data):
        for part in (self._cell, self._note):
            if part is not None:
                part.append(data)


def learned() -> HostState:
    return HostState(
        "permits.example.gov",
        category="truthful",
        evidence="2 recoveries matched the header",
        observations=(
            Observation(
                at=NOW - 300, status=429, header=13.0, form="delta", recovered=13.0, served=40
            ),
            Observation(at=NOW - 240, status=503, header=None, recovered=None, served=3, span=2.5),
            Observation(
                at=NOW - 230, status=429, header=None, recovered=1.0, served=7, at_random=True
            ),
        ),
        limit=LimitEstimate(rate=40 / 60, window=60.0, documented=1.0, updated_at=NOW - 227),
        limit_history=((NOW - 287, 3.0), (NOW - 227, 40 / 60)),
        held_until=NOW + 3600,
        held_since=NOW - 60,
        hold_reason="Retry-After 3600 corroborated",
        blocked_until=NOW - 100,
        blocked_since=NOW - 160,
        updated_at=NOW - 60,
    )


def test_refusals_holds_and_waits_per_host_in_tables():
    decisions = [
        Decision("sleep", "permits.example.gov", 13.0, "Retry-After 13 obeyed", 429, 13.0, True),
        Decision("sleep", "permits.example.gov", 47.0, "Retry-After 47 obeyed", 429, 47.0, True),
        Decision("wait", "permits.example.gov", 1.5, "pacing: 40 per 60 s"),
        Decision("give_up", "permits.example.gov", 0.0, "all 6 attempts used", 429),
        Decision(
            "hold", "permits.example.gov", 0.0, "Retry-After 3600 corroborated", until=NOW + 3600
        ),
        Decision("sleep", "other.example", 5.0, "not this host's"),
    ]
    page = render_html([("permits.example.gov", learned())], now=NOW, decisions=decisions)
    tables = Tables(page)
    refusals = tables.tables["refusals"]
    assert refusals[0][0] == "refused at (UTC)"
    assert refusals[1] == [
        "2023-11-14T22:08:20Z",
        "429",
        "13.0 s (delta)",
        "after 13.0 s",
        "0",
        "40 in 0.0 s",
    ]
    assert refusals[2] == [
        "2023-11-14T22:09:20Z",
        "503",
        "none usable",
        "not seen yet",
        "-",
        "3 in 2.5 s",
    ]
    assert refusals[3][3] == "after 1.0 s (taken for a refusal at random: no window start)"
    holds = {row[0]: row for row in tables.tables["holds"][1:]}
    assert holds["hold"] == [
        "hold",
        "2023-11-14T22:12:20Z",
        "2023-11-14T23:13:20Z",
        "in force",
        "Retry-After 3600 corroborated",
    ]
    assert holds["shared wait"][1:4] == ["2023-11-14T22:10:40Z", "2023-11-14T22:11:40Z", "ended"]
    waits = {row[0]: row for row in tables.tables["waits"][1:]}
    assert waits["retry after a refusal"][1:4] == ["2", "60.0 s", "30.0 s"]
    assert waits["retry after a refusal"][4] == "e.g. Retry-After 47 obeyed"
    assert waits["wait before a request"][1:] == ["1", "1.5 s", "1.5 s", "pacing: 40 per 60 s"]
    assert waits["give up"][1:] == ["1", "-", "-", "all 6 attempts used"]
    assert waits["hold"][4] == "Retry-After 3600 corroborated (until 2023-11-14T23:13:20Z)"
    assert "not this host's" not in page
    assert len(waits) == 4

    # The documented limit is carried into the overview and the summary.
    overview = tables.tables["overview"]
    assert overview[0][4] == "documented/min"
    assert overview[1][3:5] == ["40.0", "60.0"]
    assert ["Documented limit", "60.0 requests/min"] in tables.tables["summary"]


def test_waits_are_grouped_by_their_code_whatever_the_wording():
    decisions = [
        Decision(
            "sleep",
            "h.example",
            2.0,
            "no usable Retry-After (absent); own backoff",
            code="own_backoff",
        ),
        Decision(
            "sleep",
            "h.example",
            4.0,
            "Retry-After 108 not yet trusted; probing with own backoff",
            code="own_backoff",
        ),
        Decision("sleep", "h.example", 30.0, "Retry-After 30 obeyed", code="header_obeyed"),
    ]
    page = render_html([("h.example", HostState("h.example"))], now=NOW, decisions=decisions)
    rows = Tables(page).tables["waits"][1:]
    assert rows == [
        [
            "retry after a refusal",
            "2",
            "6.0 s",
            "3.0 s",
            "e.g. Retry-After 108 not yet trusted; probing with own backoff",
        ],
        ["retry after a refusal", "1", "30.0 s", "30.0 s", "Retry-After 30 obeyed"],
    ]


def test_every_empty_chart_and_table_says_so():
    page = render_html(
        [("quiet.example.net", HostState("quiet.example.net"))], now=NOW, decisions=[]
    )
    tables = Tables(page)
    assert set(tables.tables) == {"overview", "summary"}
    assert tables.empty == [
        "No rejection observed yet. Nothing to chart.",
        "No limit learned yet. Nothing to chart.",
        "No refusals seen yet: nothing to list.",
        "No hold or shared wait on record for this host.",
        "No waits, holds or give-ups were decided for this host in this run.",
    ]
    assert "<svg" not in page


def test_a_page_without_decisions_says_where_waits_are_found():
    tables = Tables(render_html([("permits.example.gov", learned())], now=NOW))
    (note,) = [n for n in tables.empty if "wait" in n]
    assert note.startswith("The store keeps refusals, limits and holds, not each wait")
    assert "on_decision" in note


def test_refusals_without_a_usable_header_say_why_their_chart_is_empty():
    absent = HostState(
        "absent.example",
        category="absent",
        observations=(Observation(at=NOW - 60, status=429, header=None, recovered=20.0),),
    )
    tables = Tables(render_html([("absent.example", absent)], now=NOW))
    assert tables.empty[0] == (
        "1 rejection not plotted (no usable header, no recovery seen, or a value out of "
        "range). Nothing to chart: no refusal had both a usable Retry-After and a recovery "
        "seen (the refusals are listed below)."
    )
    assert len(tables.tables["refusals"]) == 2


def test_generated_is_the_real_time_not_the_reports_now():
    before = time.time()
    page = render_html([], now=NOW)  # a virtual "now" far in the past
    after = time.time()
    (stamp,) = re.findall(r"Generated (\S+Z)", page)
    assert "2023-11-14" not in stamp
    moment = time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert int(before) - 1 <= moment <= after + 1
    assert "Generated 2001-09-09T01:46:40Z" in render_html([], now=NOW, generated=1e9)


def test_times_written_on_a_clock_ahead_are_pointed_out():
    ahead = render_html([("permits.example.gov", learned())], now=NOW, generated=NOW - 3600)
    assert re.search(r'class="note ahead">\d+ times? in the store lie after', ahead)
    assert 'class="note ahead"' not in render_html(
        [("permits.example.gov", learned())], now=NOW, generated=NOW
    )


def test_json_gains_the_steps_and_keeps_its_keys():
    data = json.loads(render_json([("permits.example.gov", learned())], now=NOW))
    assert data["generated_at"] == NOW
    assert data["generated_at_utc"] == "2023-11-14T22:13:20Z"
    (entry,) = data["hosts"]
    assert entry["documented_per_minute"] == 60.0
    assert entry["limit_steps_per_minute"] == [[NOW - 227, pytest.approx(40.0)]]
    assert entry["limit_partial_estimates_per_minute"] == [[NOW - 287, 180.0]]
    for key in ("host", "category", "limit_per_minute", "held_until", "held_until_utc", "state"):
        assert key in entry


def test_the_terminal_table_carries_the_documented_limit():
    stated = HostState(
        "s.example", limit=LimitEstimate(rate=0.5, window=60.0, documented=0.5, source="stated")
    )
    row = render_table([("s.example", stated)], now=NOW).splitlines()[1].split()
    assert row[3:6] == ["30.0", "(stated)", "30.0"]


def test_the_stated_limit_a_host_began_with_is_drawn_not_left_out_as_a_partial_window():
    # The host stated 60/min (RateLimit-Policy), the adapter began with it, and learned 40 a
    # window later: the 60 is no count of a partial window, and the chart shows the drop.
    stated = host([(-30.0, 60.0), (20.0, 40.0)], documented=60.0)
    steps = limit_steps(stated)
    assert per_minute(steps.kept) == [(-30.0, 60.0), (20.0, 40.0)]
    assert steps.partial == ()
    _, caption = line_svg(stated)
    assert "Left out" not in caption
    # The same history with another documented figure: the 60 is a first estimate, left out.
    assert per_minute(limit_steps(host([(-30.0, 60.0), (20.0, 40.0)], documented=50.0)).partial)


def test_a_give_up_or_a_hold_is_not_counted_as_time_waited():
    decisions = [
        Decision("give_up", "h.example", 3.5, "all 6 attempts used", 429, code="attempts"),
        Decision("hold", "h.example", 900.0, "Retry-After 900 corroborated", until=NOW + 900),
        Decision("sleep", "h.example", 2.0, "own backoff", 429, code="own_backoff"),
    ]
    page = render_html([("h.example", HostState("h.example"))], now=NOW, decisions=decisions)
    waits = {row[0]: row for row in Tables(page).tables["waits"][1:]}
    assert waits["give up"][1:4] == ["1", "-", "-"]
    assert waits["hold"][1:4] == ["1", "-", "-"]
    assert waits["retry after a refusal"][1:4] == ["1", "2.0 s", "2.0 s"]


def test_labels_name_each_host_under_its_heading_and_counts_are_plain_english():
    states = [("a.example", HostState("a.example")), ("b.example", HostState("b.example"))]
    page = render_html(states, now=NOW, labels={"a.example": "fixed_truthful: <40/60 s>"})
    assert '<h2>a.example</h2><p class="note label">fixed_truthful: &lt;40/60 s&gt;</p>' in page
    assert '<h2>b.example</h2><p class="note label">' not in page
    assert "- 2 hosts. Times are UTC" in page
    assert "- 1 host. Times are UTC" in render_html(states[:1], now=NOW)
    assert "(s)" not in page
