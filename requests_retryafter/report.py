"""What a store knows about each host, as a terminal table, JSON or a self-contained HTML page.

Used by ``requests-retryafter report`` and the demo; pure functions of
:class:`~requests_retryafter.HostState` values (no I/O)::

    from requests_retryafter import open_store
    from requests_retryafter.report import render_html

    with open_store("json:///var/lib/ingest/hosts.json") as store:
        page = render_html(store.items())

The HTML page needs nothing from the network: styles are inline and the charts are inline SVG
(per host, each ``Retry-After`` value against the recovery observed, and the learned limit
over time).
"""

from __future__ import annotations

import datetime
import html
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .state import HostState

__all__ = [
    "HostSummary",
    "format_epoch",
    "render_html",
    "render_json",
    "render_table",
    "summarize",
]

#: Columns of the terminal table, in order.
COLUMNS = (
    "host",
    "category",
    "obs",
    "limit/min",
    "documented/min",
    "held until",
    "last change",
)


def format_epoch(epoch: float) -> str:
    """Return ``epoch`` as a UTC ISO 8601 timestamp, ``2024-05-01T12:00:00Z``.

    ``-`` for 0 and for anything that is not a time a calendar can show (a NaN, an infinity, a
    negative or absurdly large number, a value that is not a number at all).

    >>> format_epoch(1_700_000_000)
    '2023-11-14T22:13:20Z'
    >>> format_epoch(float("nan"))
    '-'
    """
    value = _finite(epoch)
    if not value or value < 0:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "-"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _finite(value: object) -> Optional[float]:
    """``value`` as a finite float, or ``None`` (a NaN, an infinity, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def _per_minute(rate: Optional[float]) -> Optional[float]:
    value = _finite(rate)
    if value is None:
        return None
    return _finite(round(value * 60.0, 2))


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int)):
        return value
    return str(value)


@dataclass(frozen=True)
class HostSummary:
    """One host's line of a report.

    Attributes:
        host: the host key.
        category: the host's category.
        evidence: why it has that category.
        observations: rejection episodes on record.
        limit_per_minute: the learned (or stated) limit in requests per minute, if any.
        limit_source: ``"observed"`` or ``"stated"`` (``""`` without a limit).
        documented_per_minute: the limit the host states, in requests per minute, if known.
        held_until: epoch seconds the host is held until (0 when not held at ``now``).
        hold_reason: why it is held.
        updated_at: epoch seconds of the last change.
        category_changed_at: epoch seconds of the last change of category.
    """

    host: str
    category: str
    evidence: str
    observations: int
    limit_per_minute: Optional[float]
    limit_source: str
    documented_per_minute: Optional[float]
    held_until: float
    hold_reason: str
    updated_at: float
    category_changed_at: float

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict (times as epoch seconds and as UTC text)."""
        return {
            "host": self.host,
            "category": self.category,
            "evidence": self.evidence,
            "observations": self.observations,
            "limit_per_minute": self.limit_per_minute,
            "limit_source": self.limit_source or None,
            "documented_per_minute": self.documented_per_minute,
            "held_until": _finite(self.held_until) or None,
            "held_until_utc": _utc(self.held_until),
            "hold_reason": self.hold_reason or None,
            "updated_at": _finite(self.updated_at),
            "updated_at_utc": _utc(self.updated_at),
            "category_changed_at": _finite(self.category_changed_at) or None,
        }


def _utc(epoch: float) -> Optional[str]:
    text = format_epoch(epoch)
    return None if text == "-" else text


def summarize(state: HostState, *, now: float) -> HostSummary:
    """Summarise ``state`` as seen at epoch time ``now`` (a hold that has ended is not shown)."""
    limit = state.limit
    # A hold whose end is not a number (NaN) is no hold; an infinite one is shown as held
    # (with "-" for its end), so that the reader sees that something is wrong with the host.
    held = state.held_until if state.held_until > now else 0.0
    return HostSummary(
        host=state.host,
        category=state.category,
        evidence=state.evidence,
        observations=len(state.observations),
        limit_per_minute=None if limit is None else _per_minute(limit.rate),
        limit_source="" if limit is None else limit.source,
        documented_per_minute=None if limit is None else _per_minute(limit.documented),
        held_until=held,
        hold_reason=state.hold_reason if held else "",
        updated_at=state.updated_at,
        category_changed_at=state.category_changed_at,
    )


def _sorted(items: Iterable[Tuple[str, HostState]]) -> List[HostState]:
    return [state for _, state in sorted(items, key=lambda item: item[0])]


def _number(value: Optional[float]) -> str:
    """A number for a table cell: one decimal, ``-`` when absent or not finite, and in
    scientific notation when too large to read (a stored 1e300 must not make a 300-digit
    cell)."""
    number = _finite(value)
    if number is None:
        return "-"
    if abs(number) >= 1e7:
        return f"{number:.3g}"
    return f"{number:.1f}"


#: Control characters (C0, DEL, C1, and the line and paragraph separators), which a stored
#: string must not bring to a terminal (an escape sequence, a line feed inside a cell).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), so that a
    value read from a store or a server cannot move the cursor or recolour a terminal.

    >>> print(printable("ok\x1b[2Jgone"))
    ok\\x1b[2Jgone
    """
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def table_rows(items: Iterable[Tuple[str, HostState]], *, now: float) -> List[List[str]]:
    """The terminal table's rows (strings, in :data:`COLUMNS` order), sorted by host; text
    from the store is passed through :func:`printable`."""
    rows = []
    for state in _sorted(items):
        s = summarize(state, now=now)
        limit = _number(s.limit_per_minute)
        if s.limit_source == "stated":
            limit += " (stated)"
        rows.append(
            [
                printable(s.host),
                printable(s.category),
                str(s.observations),
                limit,
                _number(s.documented_per_minute),
                format_epoch(s.held_until),
                format_epoch(s.updated_at),
            ]
        )
    return rows


def render_table(items: Iterable[Tuple[str, HostState]], *, now: float) -> str:
    """Render a plain-text table, one host per line, with a header line.

    Args:
        items: ``(host, state)`` pairs, e.g. ``store.items()``.
        now: epoch seconds, to tell current holds from ended ones.
    """
    rows = table_rows(items, now=now)
    if not rows:
        return "no hosts in the store\n"
    widths = [max(len(row[i]) for row in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    header = "  ".join(name.ljust(w) for name, w in zip(COLUMNS, widths)).rstrip()
    return "\n".join([header, *lines]) + "\n"


def render_json(items: Iterable[Tuple[str, HostState]], *, now: float) -> str:
    """Render JSON: ``{"generated_at": ..., "hosts": [...]}``, one object per host with the
    summary fields and the full stored ``state``."""
    hosts = []
    for state in _sorted(items):
        entry = summarize(state, now=now).to_dict()
        entry["state"] = state.to_dict()
        hosts.append(_json_safe(entry))
    document = {"generated_at": _finite(now), "hosts": hosts}
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"


# -- HTML ---------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;
max-width:72rem}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2.5rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:1rem 0}th,td{padding:.25rem .6rem;text-align:left;
border-bottom:1px solid #eee;font-variant-numeric:tabular-nums}th{background:#f6f6f6}
.charts{display:flex;flex-wrap:wrap;gap:1.5rem}.chart{flex:1 1 22rem}
.chart h3{font-size:.95rem;margin:.5rem 0}.note{color:#666;font-size:.85rem}
.cat{display:inline-block;padding:0 .4rem;border-radius:.3rem;background:#eef}
svg text{font-size:11px;fill:#444}
"""

_W, _H = 360, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 22, 12, 36


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _log_pos(value: float) -> float:
    return math.log10(1.0 + max(0.0, value))


def _log_ticks(top: float) -> List[float]:
    """0, 1, 10, 100, ... up to the first power of ten at or above ``top``."""
    ticks = [0.0, 1.0]
    while ticks[-1] < top:
        ticks.append(ticks[-1] * 10)
    return ticks


def _nice_step(span: float, parts: int = 4) -> float:
    """A round step (1, 2 or 5 times a power of ten) that covers ``span`` in ``parts``."""
    raw = max(span, 1e-9) / parts
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= raw:
            return factor * power
    return 10.0 * power  # pragma: no cover - the loop always returns


#: The largest value a chart plots (seconds, or requests per minute); beyond it a stored
#: value is damage, not data, and is left out with a note.
_MAX_PLOT = 1e9
#: The latest moment the limit chart plots (epoch seconds, the year 5138).
_MAX_PLOT_EPOCH = 1e11


def _plottable(value: Optional[float], top: float = _MAX_PLOT) -> Optional[float]:
    """``value`` when a chart can place it (finite, from 0 to ``top``), else ``None``."""
    number = _finite(value)
    if number is None or number < 0 or number > top:
        return None
    return number


def _times_60(rate: Optional[float]) -> Optional[float]:
    """A rate per second as per minute (unrounded, for charts), ``None`` when not finite."""
    value = _finite(rate)
    return None if value is None else _finite(value * 60.0)


def _fmt_seconds(value: float) -> str:
    return f"{value:g}"


def scatter_svg(state: HostState) -> Tuple[str, str]:
    """An inline SVG scatter of ``Retry-After`` (x) against the observed recovery (y), both
    on a log scale, with the line where they are equal. Returns ``(svg, note)``."""
    points = []
    for o in state.observations:
        header, recovered = _plottable(o.header), _plottable(o.recovered)
        if header is not None and recovered is not None:
            points.append((header, recovered, o.status))
    left_out = len(state.observations) - len(points)
    note = ""
    if left_out:
        note = (
            f"{left_out} rejection(s) not plotted (no usable header, no recovery seen, or a "
            "value out of range)."
        )
    if not points:
        return "", note or "No rejection observed yet."
    top = max(max(h, r) for h, r, _ in points)
    top = max(top, 10.0)
    ticks = _log_ticks(top)
    scale_top = _log_pos(ticks[-1])
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(v: float) -> float:
        return _LEFT + pw * _log_pos(v) / scale_top

    def y(v: float) -> float:
        return _TOP + ph * (1.0 - _log_pos(v) / scale_top)

    parts = [_svg_open("Retry-After against observed recovery")]
    parts.extend(_axes(pw, ph))
    for t in ticks:
        parts.append(
            f'<line x1="{x(t):.1f}" y1="{_TOP + ph}" x2="{x(t):.1f}" y2="{_TOP + ph + 4}" '
            'stroke="#888"/>'
            f'<text x="{x(t):.1f}" y="{_TOP + ph + 16}" text-anchor="middle">'
            f"{_fmt_seconds(t)}</text>"
            f'<line x1="{_LEFT - 4}" y1="{y(t):.1f}" x2="{_LEFT}" y2="{y(t):.1f}" stroke="#888"/>'
            f'<text x="{_LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">'
            f"{_fmt_seconds(t)}</text>"
        )
    edge = ticks[-1]
    parts.append(
        f'<line x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(edge):.1f}" y2="{y(edge):.1f}" '
        'stroke="#9c9" stroke-dasharray="4 3"><title>recovery = header</title></line>'
    )
    for header, recovered, status in points:
        colour = "#c33" if status == 429 else "#36c"
        parts.append(
            f'<circle cx="{x(header):.1f}" cy="{y(recovered):.1f}" r="4" fill="{colour}" '
            f'fill-opacity="0.7"><title>{status}: header {header:g} s, recovered in '
            f"{recovered:g} s</title></circle>"
        )
    parts.append(
        f'<text x="{_LEFT + pw / 2:.0f}" y="{_H - 4}" text-anchor="middle">'
        "Retry-After (s, log)</text>"
        f'<text x="12" y="{_TOP + ph / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {_TOP + ph / 2:.0f})">recovery (s, log)</text>'
    )
    parts.append("</svg>")
    return "".join(parts), note


def line_svg(state: HostState) -> Tuple[str, str]:
    """An inline SVG line of the learned limit (requests per minute) over time, with the
    documented limit dashed when known. Returns ``(svg, note)``."""
    history = []
    for t, r in state.limit_history:
        moment, per_minute = _plottable(t, _MAX_PLOT_EPOCH), _plottable(_times_60(r))
        if moment is not None and per_minute is not None:
            history.append((moment, per_minute))
    left_out = len(state.limit_history) - len(history)
    documented = None
    if state.limit is not None:
        documented = _plottable(_times_60(state.limit.documented))
    if not history:
        if left_out:
            return "", f"No limit to plot: {left_out} point(s) out of range."
        return "", "No limit learned yet."
    history.sort()
    t0, t1 = history[0][0], history[-1][0]
    span = max(t1 - t0, 1e-9)
    values = [v for _, v in history] + ([documented] if documented is not None else [])
    step = _nice_step(max(values) * 1.1)
    top = step * max(1, math.ceil(max(values) * 1.1 / step))
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + (pw / 2 if t1 == t0 else pw * (t - t0) / span)

    def y(v: float) -> float:
        return _TOP + ph * (1.0 - v / top)

    parts = [_svg_open("Learned limit over time")]
    parts.extend(_axes(pw, ph))
    for i in range(round(top / step) + 1):
        v = step * i
        parts.append(
            f'<line x1="{_LEFT - 4}" y1="{y(v):.1f}" x2="{_LEFT + pw}" y2="{y(v):.1f}" '
            'stroke="#eee"/>'
            f'<text x="{_LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>'
        )
    if documented is not None:
        parts.append(
            f'<line x1="{_LEFT}" y1="{y(documented):.1f}" x2="{_LEFT + pw}" '
            f'y2="{y(documented):.1f}" stroke="#999" stroke-dasharray="5 4">'
            f"<title>documented {documented:.1f}/min</title></line>"
        )
    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in history)
    parts.append(f'<polyline points="{path}" fill="none" stroke="#c63" stroke-width="2"/>')
    for t, v in history:
        parts.append(
            f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="#c63">'
            f"<title>{_esc(format_epoch(t))}: {v:.1f}/min</title></circle>"
        )
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP + ph + 16}">{_esc(format_epoch(t0))}</text>'
        f'<text x="{_LEFT + pw}" y="{_TOP + ph + 30}" text-anchor="end">'
        f"{_esc(format_epoch(t1))}</text>"
        f'<text x="12" y="{_TOP + ph / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {_TOP + ph / 2:.0f})">requests/min</text>'
    )
    parts.append("</svg>")
    return "".join(parts), (f"{left_out} point(s) out of range not plotted." if left_out else "")


def _svg_open(label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_esc(label)}" '
        f'width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}">'
    )


def _axes(pw: float, ph: float) -> Sequence[str]:
    return (
        f'<rect x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}" fill="#fcfcfc" stroke="#ccc"/>',
    )


def _summary_table(s: HostSummary) -> str:
    rows = [
        ("Category", f'<span class="cat">{_esc(s.category)}</span>'),
        ("Evidence", _esc(s.evidence or "-")),
        ("Observations", str(s.observations)),
        (
            "Learned limit",
            _esc(
                "-"
                if _finite(s.limit_per_minute) is None
                else f"{_number(s.limit_per_minute)} requests/min ({s.limit_source})"
            ),
        ),
        (
            "Documented limit",
            _esc(
                "-"
                if _finite(s.documented_per_minute) is None
                else f"{_number(s.documented_per_minute)} requests/min"
            ),
        ),
        (
            "Held until",
            _esc("-" if not s.held_until else f"{format_epoch(s.held_until)}: {s.hold_reason}"),
        ),
        ("Category changed", _esc(format_epoch(s.category_changed_at))),
        ("Last change", _esc(format_epoch(s.updated_at))),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def render_html(
    items: Iterable[Tuple[str, HostState]],
    *,
    now: float,
    title: str = "requests-retryafter report",
) -> str:
    """Render a self-contained HTML page: an overview table, then per host its summary and
    two inline SVG charts. No external scripts, styles or fonts.

    Args:
        items: ``(host, state)`` pairs, e.g. ``store.items()``.
        now: epoch seconds (the report's date, and to tell current holds from ended ones).
        title: the page title.
    """
    states = _sorted(items)
    overview = table_rows(((s.host, s) for s in states), now=now)
    head = "".join(f"<th>{_esc(c)}</th>" for c in COLUMNS)
    body_rows = "".join(
        "<tr>"
        + "".join(
            f'<td><a href="#host-{i}">{_esc(c)}</a></td>' if j == 0 else f"<td>{_esc(c)}</td>"
            for j, c in enumerate(row)
        )
        + "</tr>"
        for i, row in enumerate(overview)
    )
    sections = []
    for i, state in enumerate(states):
        summary = summarize(state, now=now)
        scatter, scatter_note = scatter_svg(state)
        line, line_note = line_svg(state)
        sections.append(
            f'<section id="host-{i}"><h2>{_esc(state.host)}</h2>{_summary_table(summary)}'
            '<div class="charts">'
            '<div class="chart"><h3>Retry-After against observed recovery</h3>'
            f"{scatter}"
            f'<p class="note">{_esc(scatter_note)} Points below the dashed line: the host '
            "recovered sooner than its header said; above: later. Red: 429, blue: 503.</p>"
            "</div>"
            '<div class="chart"><h3>Learned limit over time</h3>'
            f'{line}<p class="note">{_esc(line_note)} Dashed: the documented limit.</p></div>'
            "</div></section>"
        )
    if not states:
        sections.append('<p class="note">No hosts in the store.</p>')
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_esc(title)}</h1>"
        f'<p class="note">Generated {_esc(format_epoch(now))} - {len(states)} host(s). '
        "Limits are in requests per minute.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table>"
        + "".join(sections)
        + "</body></html>\n"
    )
