"""What a store knows about each host, as a terminal table, JSON or a self-contained HTML page.

Used by ``requests-retryafter report`` and the demo; pure functions of
:class:`~requests_retryafter.HostState` values (no I/O)::

    from requests_retryafter import open_store
    from requests_retryafter.report import render_html

    with open_store("json:///var/lib/ingest/hosts.json") as store:
        page = render_html(store.items())

The HTML page needs nothing from the network: styles are inline and the charts are inline SVG
(per host, each ``Retry-After`` value against the recovery observed, and a step chart of the
learned limit over time with the documented limit dashed), followed by tables of the host's
refusals, holds and, when the page is given a run's decisions, its waits and give-ups.
"""

from __future__ import annotations

import datetime
import html
import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .decisions import Decision
from .state import HostState, LimitEstimate, Search

__all__ = [
    "HostSummary",
    "LimitSteps",
    "format_epoch",
    "limit_steps",
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
    "pace/min",
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
        pace_per_minute: the even pace the store keeps for the host, in requests per minute,
            if any: the workers' shared search's rate (all of them together, while they
            share the host), else the even pace a trial kept for a client alone on a host
            that states what remains (see ``pace_source``).
        pace_source: ``"shared search"`` or ``"kept trial"`` (``""`` without a pace).
        pacing: how the learned limit is paced, in words: its budget per window, sent at each
            window's start or spread evenly, and what is still being tried (a window being
            narrowed, a rate on trial since the last probe, the rate before the last cut);
            and, for workers sharing the host, their search's rate that held, the smallest
            refused and a rate on trial; and whether its statements of none remaining are
            set aside, refuted by its own answers. ``""`` with none of these.
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
    pace_per_minute: Optional[float] = None
    pace_source: str = ""
    pacing: str = ""

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
            "pace_per_minute": self.pace_per_minute,
            "pace_source": self.pace_source or None,
            "pacing": self.pacing or None,
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
    pace, pace_source = _pace(state)
    pace_per_minute = _per_minute(pace)
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
        pace_per_minute=pace_per_minute,
        pace_source=pace_source if pace_per_minute is not None else "",
        pacing=_pacing(limit, state.search, state.stated_refuted),
    )


def _pacing(limit: Optional[LimitEstimate], search: Optional[Search], refuted: bool) -> str:
    """:attr:`HostSummary.pacing` of ``limit``, the workers' shared ``search`` and whether
    the host's statements of none remaining were ``refuted`` (``HostState.stated_refuted``)."""
    parts = []
    if limit is not None and limit.burst and _finite(limit.window):
        how = (
            "spread evenly (a token bucket or a sliding window counter)"
            if limit.even
            else "sent at each window's start"
            + (", its windows located on the clock" if limit.anchor is not None else "")
        )
        parts.append(f"{limit.burst} requests per {_number(limit.window)} s, {how}")
        if _finite(limit.shortest) and not limit.even:
            parts.append(
                f"the window is being narrowed: no shorter than {_number(limit.shortest)} s"
            )
        if limit.held is not None:
            parts.append(
                f"on trial since the last probe: a refusal goes back to {limit.held} a window"
            )
        if _finite(limit.peak):
            peak = _number(_per_minute(limit.peak))
            parts.append(f"{peak} requests/min before the last cut, to be tried again")
        if limit.even and limit.opening:
            turn = "" if limit.opening_clock is False else " or the clock's"
            parts.append(
                f"a run's first {limit.opening} requests at once (the host let them through "
                f"when idle), the next at the turn of the window they opened{turn}"
            )
    if search is not None:
        said = f"the workers' shared search: {_number(_per_minute(search.held))} requests/min held"
        if search.lower:
            said += " (a lower bound, doubled until refused)"
        if (_finite(search.ceiling) or 0.0) > 0:
            said += f", {_number(_per_minute(search.ceiling))} refused"
        if search.probing:
            said += f", {_number(_per_minute(search.rate))} on trial"
        parts.append(said)
    if refuted:
        parts.append(
            "its answers saying none of its window remains are not waited for: requests "
            "sent before the resets they stated got through (until it refuses)"
        )
    return "; ".join(parts)


def _pace(state: HostState) -> Tuple[Optional[float], str]:
    """The even pace the store keeps for the host (requests per second) and what set it:
    the workers' shared search, else the even pace a trial kept (``(None, "")``: none)."""
    if state.search is not None:
        return state.search.rate, "shared search"
    if state.even_pace is not None:
        return state.even_pace[0], "kept trial"
    return None, ""


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
                _pace_cell(s),
                format_epoch(s.held_until),
                format_epoch(s.updated_at),
            ]
        )
    return rows


def _pace_cell(s: HostSummary) -> str:
    """The table's pace cell: ``570.0 (shared search)``, or ``-``."""
    number = _number(s.pace_per_minute)
    return number if number == "-" else f"{number} ({s.pace_source})"


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
    """Render JSON: ``{"generated_at": ..., "generated_at_utc": ..., "hosts": [...]}``, one
    object per host with the summary fields, the full stored ``state``, and the limit history
    as the HTML page's step chart draws it (``limit_steps_per_minute``: ``[epoch, requests
    per minute]`` pairs) and the first estimates it leaves out
    (``limit_partial_estimates_per_minute``; see :func:`limit_steps`).
    """
    hosts = []
    for state in _sorted(items):
        entry = summarize(state, now=now).to_dict()
        entry["state"] = state.to_dict()
        steps = limit_steps(state)
        entry["limit_steps_per_minute"] = [list(p) for p in steps.kept]
        entry["limit_partial_estimates_per_minute"] = [list(p) for p in steps.partial]
        hosts.append(_json_safe(entry))
    document = {"generated_at": _finite(now), "generated_at_utc": _utc(now), "hosts": hosts}
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
svg text{font-size:11px;fill:#444}h3{font-size:1rem;margin:1.2rem 0 .3rem}
.empty{font-style:italic}.ahead{color:#a40}code{font-size:.85em}
.refusals td,.holds td,.overview td{white-space:nowrap}.holds td:last-child{white-space:normal}
table{display:block;max-width:100%;overflow-x:auto}svg{max-width:100%;height:auto}
.holds td:last-child,.waits td:last-child{min-width:14rem}
"""

_W, _H = 360, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 22, 12, 36


def _plural(count: int, word: str) -> str:
    """``1 rejection``, ``2 rejections``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


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
            f"{_plural(left_out, 'rejection')} not plotted (no usable header, no recovery "
            "seen, or a value out of range)."
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

    parts = [_svg_open("Retry-After against observed recovery", "recovery-chart")]
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


@dataclass(frozen=True)
class LimitSteps:
    """A host's learned-limit history as the report's step chart draws it.

    Attributes:
        kept: the ``(epoch, requests per minute)`` points drawn, oldest first.
        partial: the leading points left out as first estimates from a partial window
            (see :func:`limit_steps`), oldest first.
        out_of_range: how many stored points no chart can place (a NaN, a time no clock
            reaches, a rate beyond any host's).
        window: the window in seconds the rule measured with (the learned one), if any.

    .. versionadded:: 0.1.0
    """

    kept: Tuple[Tuple[float, float], ...]
    partial: Tuple[Tuple[float, float], ...]
    out_of_range: int
    window: Optional[float]


#: How far past one window a replacement may come and still count as "within one window"
#: (estimates are made at recoveries, which land a little after a window's end).
_WINDOW_SLACK = 1.05


def limit_steps(state: HostState) -> LimitSteps:
    """Split ``state.limit_history`` into the points the step chart draws and the
    first estimates it leaves out.

    A first estimate counts requests served before the first refusal, and the client rarely
    starts at the start of the host's window: so it counts a whole window's requests in part
    of one, and overstates the limit (often tenfold). The rule, from the stored data alone:
    starting with the oldest point, a point is left out while the next one is lower and the
    point was either made within one window (the learned window) after the host's first
    refusal on record, or replaced within about one window (5 % slack). The first point that
    fails the rule, and every point after it, is drawn; the newest point always is. A point at
    the host's documented limit is the limit it stated, not a count, and is always drawn.

    >>> from requests_retryafter import HostState, LimitEstimate, Observation
    >>> from requests_retryafter.report import limit_steps
    >>> state = HostState(
    ...     "h",
    ...     observations=(Observation(at=1000.0, status=429, header=None, recovered=13.0),),
    ...     limit=LimitEstimate(rate=40 / 60, window=60.0),
    ...     limit_history=((1013.0, 3.0), (1073.0, 40 / 60)),
    ... )
    >>> steps = limit_steps(state)
    >>> steps.partial, steps.kept
    (((1013.0, 180.0),), ((1073.0, 40.0),))

    .. versionadded:: 0.1.0
    """
    points = []
    for t, r in state.limit_history:
        moment, per_minute = _plottable(t, _MAX_PLOT_EPOCH), _plottable(_times_60(r))
        if moment is not None and per_minute is not None:
            points.append((moment, per_minute))
    points.sort()
    out_of_range = len(state.limit_history) - len(points)
    window = None if state.limit is None else _plottable(state.limit.window)
    if not window:
        return LimitSteps(tuple(points), (), out_of_range, None)
    refusals = [a for a in (_plottable(o.at, _MAX_PLOT_EPOCH) for o in state.observations) if a]
    first_refusal = min(refusals) if refusals else None
    documented = None if state.limit is None else _plottable(_times_60(state.limit.documented))
    dropped = 0
    while dropped < len(points) - 1:
        (t, value), (t_next, value_next) = points[dropped], points[dropped + 1]
        if value_next >= value:
            break
        if documented is not None and math.isclose(value, documented, rel_tol=1e-9):
            break  # the stated limit the adapter began with (wrong or not), not a count
        early = first_refusal is not None and 0 < t - first_refusal < window
        replaced_soon = t_next - t <= window * _WINDOW_SLACK
        if not (early or replaced_soon):
            break
        dropped += 1
    return LimitSteps(tuple(points[dropped:]), tuple(points[:dropped]), out_of_range, window)


def _rate_text(per_minute: float) -> str:
    return f"{_number(per_minute)}/min"


def line_svg(state: HostState) -> Tuple[str, str]:
    """An inline SVG step chart of the learned limit (requests per minute) over time, scaled
    to the values drawn, with the documented limit as a dashed line when known. First
    estimates from a partial window are left out (see :func:`limit_steps`). Returns
    ``(svg, caption)``: the caption says what is drawn and what was left out."""
    steps = limit_steps(state)
    history = list(steps.kept)
    left_out = steps.out_of_range
    documented = None
    if state.limit is not None:
        documented = _plottable(_times_60(state.limit.documented))
    if not history:
        if left_out:
            return "", f"No limit to plot: {_plural(left_out, 'point')} out of range."
        return "", "No limit learned yet."
    t0, t_last = history[0][0], history[-1][0]
    # The newest estimate is in force still: its step runs on to the host's last change, or
    # (when that is the estimate itself) a window or a tenth of the span past it.
    end = _plottable(state.updated_at, _MAX_PLOT_EPOCH) or t_last
    if end <= t_last:
        end = t_last + max(steps.window or 0.0, (t_last - t0) / 10.0, 1.0)
    values = [v for _, v in history] + ([documented] if documented is not None else [])
    highest = max(values) * 1.1 or 1.0
    step = _nice_step(highest)
    top = step * max(1, math.ceil(highest / step))
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + pw * (t - t0) / (end - t0)

    def y(v: float) -> float:
        return _TOP + ph * (1.0 - v / top)

    parts = [_svg_open("Learned limit over time", "limit-chart")]
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
            f'<line class="documented" data-value="{documented:g}" x1="{_LEFT}" '
            f'y1="{y(documented):.1f}" x2="{_LEFT + pw}" y2="{y(documented):.1f}" '
            'stroke="#555" stroke-width="1.5" stroke-dasharray="6 4">'
            f"<title>documented {documented:.1f}/min</title></line>"
            f'<text x="{_LEFT + pw - 2}" y="{y(documented) - 4:.1f}" text-anchor="end">'
            f"documented {_number(documented)}</text>"
        )
    corners = []
    for i, (t, v) in enumerate(history):
        if i:
            corners.append((x(t), y(history[i - 1][1])))
        corners.append((x(t), y(v)))
    corners.append((x(end), y(history[-1][1])))
    path = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in corners)
    parts.append(
        f'<polyline class="steps" points="{path}" fill="none" stroke="#c63" stroke-width="2"/>'
    )
    for t, v in history:
        parts.append(
            f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="#c63">'
            f"<title>{_esc(format_epoch(t))}: {v:.1f}/min</title></circle>"
        )
    parts.append(
        f'<text x="{_LEFT}" y="{_TOP + ph + 16}">{_esc(format_epoch(t0))}</text>'
        f'<text x="{_LEFT + pw}" y="{_TOP + ph + 30}" text-anchor="end">'
        f"{_esc(format_epoch(end))}</text>"
        f'<text x="12" y="{_TOP + ph / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {_TOP + ph / 2:.0f})">requests/min</text>'
    )
    parts.append("</svg>")
    return "".join(parts), _line_caption(steps, documented)


def _line_caption(steps: LimitSteps, documented: Optional[float]) -> str:
    words = [
        "Steps: the learned limit in requests per minute, on a scale from 0 to the largest "
        "value drawn; each estimate holds until the next replaced it, and the newest runs on "
        "to the right edge."
    ]
    if steps.partial:
        shown = ", ".join(f"{_rate_text(v)} at {format_epoch(t)}" for t, v in steps.partial[:3]) + (
            ", ..." if len(steps.partial) > 3 else ""
        )
        words.append(
            f"Left out: {_plural(len(steps.partial), 'early estimate')} from partial windows "
            f"({shown}), "
            "which overstate the limit. The rule: from the oldest point on, a point is left "
            "out while the next is lower and it was made within one window "
            f"({steps.window:g} s) of the host's first refusal on record, or replaced within "
            "about one window."
        )
    if steps.out_of_range:
        words.append(f"{_plural(steps.out_of_range, 'point')} out of range not plotted.")
    if documented is not None:
        words.append(f"Dashed: the documented limit, {_rate_text(documented)}.")
    else:
        words.append("No documented limit is known for this host, so no dashed line.")
    return " ".join(words)


def _svg_open(label: str, kind: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{kind}" role="img" '
        f'aria-label="{_esc(label)}" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}">'
    )


def _axes(pw: float, ph: float) -> Sequence[str]:
    return (
        f'<rect class="plot" x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}" fill="#fcfcfc" '
        'stroke="#ccc"/>',
    )


def _text(value: object) -> str:
    """Text from a store or a decision, escaped for HTML, control characters shown."""
    return _esc(printable(str(value)))


def _summary_table(s: HostSummary) -> str:
    rows = [
        ("Category", f'<span class="cat">{_text(s.category)}</span>'),
        ("Evidence", _text(s.evidence or "-")),
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
        ("Paced as", _text(s.pacing or "-")),
        (
            "Even pace",
            _esc(
                "-"
                if _finite(s.pace_per_minute) is None
                else f"{_number(s.pace_per_minute)} requests/min ({s.pace_source})"
            ),
        ),
        (
            "Held until",
            _text("-" if not s.held_until else f"{format_epoch(s.held_until)}: {s.hold_reason}"),
        ),
        ("Category changed", _esc(format_epoch(s.category_changed_at))),
        ("Last change", _esc(format_epoch(s.updated_at))),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="summary">{body}</table>'


def _table(kind: str, head: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    """A table of already-escaped cells, or the sentence ``empty`` when there are no rows."""
    if not rows:
        return f'<p class="note empty {kind}">{_esc(empty)}</p>'
    header = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{kind}"><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>'


def _seconds(value: Optional[float]) -> str:
    text = _number(value)
    return text if text == "-" else f"{text} s"


def _refusals_table(state: HostState) -> str:
    rows = []
    for o in state.observations:
        if o.header is None:
            asked = "none usable"
        else:
            asked = _seconds(o.header) + (f" ({printable(o.form)})" if o.form else "")
        recovered = "not seen yet" if o.recovered is None else f"after {_seconds(o.recovered)}"
        if o.at_random:
            recovered += " (taken for a refusal at random: no window start)"
        served = f"{o.served} in {_seconds(o.span)}" if o.served else "-"
        rows.append(
            [
                _esc(format_epoch(o.at)),
                _esc(o.status),
                _esc(asked),
                _esc(recovered),
                _esc("-" if o.header is None else o.misses),
                _esc(served),
            ]
        )
    return _table(
        "refusals",
        (
            "refused at (UTC)",
            "status",
            "Retry-After asked",
            "next 2xx (recovery)",
            "refused after the header's time",
            "served before",
        ),
        rows,
        "No refusals seen yet: nothing to list.",
    )


def _holds_table(state: HostState, now: float) -> str:
    rows = []
    entries = (
        ("hold", state.held_since, state.held_until, state.hold_reason or "-"),
        (
            "shared wait",
            state.blocked_since,
            state.blocked_until,
            "no request to the host before then, from any worker sharing the store",
        ),
    )
    for kind, since, until, reason in entries:
        if not until > 0:  # also leaves out a NaN
            continue
        rows.append(
            [
                _esc(kind),
                _esc(format_epoch(since)),
                _esc(format_epoch(until)),
                _esc("in force" if until > now else "ended"),
                _text(reason),
            ]
        )
    return _table(
        "holds",
        ("kind", "since (UTC)", "until (UTC)", "when generated", "reason"),
        rows,
        "No hold or shared wait on record for this host.",
    )


#: The order of events in a waits table, and how each is named there.
_EVENT_LABELS = (
    ("sleep", "retry after a refusal"),
    ("wait", "wait before a request"),
    ("hold", "hold"),
    ("give_up", "give up"),
    ("refuse", "returned unretried"),
    ("ignore", "header ignored"),
    ("category", "category changed"),
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _waits_table(decisions: Optional[Sequence[Decision]]) -> str:
    if decisions is None:
        return (
            '<p class="note empty waits">The store keeps refusals, limits and holds, not each '
            "wait or give-up: those are logged as they happen and passed to the "
            "<code>on_decision</code> hook (<code>requests-retryafter get -v</code> prints "
            "them). A page built with a run's decisions lists them here.</p>"
        )
    order = {event: i for i, (event, _) in enumerate(_EVENT_LABELS)}
    labels = dict(_EVENT_LABELS)
    groups: Dict[Tuple[str, str], List[Decision]] = {}
    for d in decisions:
        # By the decision's stable code when it has one, else by its reason's wording.
        key = d.code or _NUMBER.sub("N", d.reason)
        groups.setdefault((str(d.event), key), []).append(d)
    rows = []
    ranked = sorted(groups.items(), key=lambda g: (order.get(g[0][0], len(order)), -len(g[1])))
    for (event, _), group in ranked:
        # A give-up or a hold says what it would have needed; only sleeps and waits are slept.
        slept = event in ("sleep", "wait")
        waits = [w for w in (_finite(d.wait) for d in group) if w is not None and slept]
        total = sum(waits)
        varied = len({d.reason for d in group}) > 1
        reason = ("e.g. " if varied else "") + group[-1].reason
        holds = [d.until for d in group if event == "hold" and _finite(d.until)]
        if holds:
            reason += f" (until {format_epoch(max(holds))})"
        rows.append(
            [
                _text(labels.get(event, event)),
                _esc(len(group)),
                _esc(_seconds(total) if waits and total else "-"),
                _esc(_seconds(total / len(waits)) if waits and total else "-"),
                _text(reason),
            ]
        )
    return _table(
        "waits",
        ("decision", "times", "waited in all", "average", "reason"),
        rows,
        "No waits, holds or give-ups were decided for this host in this run.",
    )


def _stored_times(state: HostState) -> List[float]:
    times = [state.updated_at, state.category_changed_at, state.held_since, state.blocked_since]
    times.extend(o.at for o in state.observations)
    times.extend(t for t, _ in state.limit_history)
    return [t for t in (_finite(t) for t in times) if t is not None]


def render_html(
    items: Iterable[Tuple[str, HostState]],
    *,
    now: float,
    title: str = "requests-retryafter report",
    decisions: Optional[Iterable[Decision]] = None,
    generated: Optional[float] = None,
    labels: Optional[Mapping[str, str]] = None,
) -> str:
    """Render a self-contained HTML page: an overview table, then per host its summary, two
    inline SVG charts (``Retry-After`` against recovery; a step chart of the learned limit)
    and tables of its refusals, holds and (given ``decisions``) waits and give-ups. A
    sentence stands wherever a chart or table has nothing to show. No scripts, and no
    external styles, fonts or images.

    Args:
        items: ``(host, state)`` pairs, e.g. ``store.items()``.
        now: epoch seconds, to tell current holds from ended ones.
        title: the page title.
        decisions: the :class:`~requests_retryafter.Decision` values of a run (e.g. collected
            with ``on_decision=list.append``), in a table per host, grouped by event and
            :attr:`~requests_retryafter.Decision.code`, with the latest reason of each group.
        generated: epoch seconds the page says it was generated; default the real time now
            (``time.time()``), never a virtual clock.
        labels: a few words per host key, shown under the host's heading (the demo names
            and describes its portals so).
    """
    generated_at = time.time() if generated is None else generated
    states = _sorted(items)
    by_host: Optional[Dict[str, List[Decision]]] = None
    if decisions is not None:
        by_host = {}
        for d in decisions:
            by_host.setdefault(d.host, []).append(d)
    overview = table_rows(((s.host, s) for s in states), now=now)
    known = dict(labels or {})

    def label_note(host: str) -> str:
        label = known.get(host)
        return f'<p class="note label">{_text(label)}</p>' if label else ""

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
    ahead = 0
    for i, state in enumerate(states):
        summary = summarize(state, now=now)
        ahead += sum(1 for t in _stored_times(state) if t > generated_at + 1.0)
        scatter, scatter_note = scatter_svg(state)
        line, line_note = line_svg(state)
        if scatter:
            scatter_text = (
                f"{scatter_note} Points below the dashed line: the host recovered sooner than "
                "its header said; above: later. Red: 429, blue: 503."
            ).strip()
        elif state.observations:
            scatter_text = (
                f"{scatter_note} Nothing to chart: no refusal had both a usable Retry-After "
                "and a recovery seen (the refusals are listed below)."
            )
        else:
            scatter_text = f"{scatter_note} Nothing to chart."
        if not line:
            line_note += " Nothing to chart."
        waits = _waits_table(None if by_host is None else by_host.get(state.host, []))
        sections.append(
            f'<section id="host-{i}"><h2>{_text(state.host)}</h2>{label_note(state.host)}'
            f"{_summary_table(summary)}"
            '<div class="charts">'
            '<div class="chart"><h3>Retry-After against observed recovery</h3>'
            f'{scatter}<p class="note{"" if scatter else " empty"}">{_esc(scatter_text)}</p>'
            "</div>"
            '<div class="chart"><h3>Learned limit over time</h3>'
            f'{line}<p class="note{"" if line else " empty"}">{_esc(line_note)}</p></div>'
            "</div>"
            f"<h3>Refusals</h3>{_refusals_table(state)}"
            f"<h3>Holds and shared waits</h3>{_holds_table(state, now)}"
            f"<h3>Waits and give-ups</h3>{waits}"
            "</section>"
        )
    if not states:
        sections.append('<p class="note empty">No hosts in the store.</p>')
    warning = ""
    if ahead:
        warning = (
            f'<p class="note ahead">{_plural(ahead, "time")} in the store lie after this page '
            "was generated: they were written on a clock ahead of this machine's (the demo's "
            "virtual clock runs ahead of real time).</p>"
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_esc(title)}</h1>"
        f'<p class="note">Generated {_esc(format_epoch(generated_at))} - '
        f"{_plural(len(states), 'host')}. Times are UTC; limits are in requests per minute.</p>"
        f"{warning}"
        f'<table class="overview"><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody>'
        "</table>" + "".join(sections) + "</body></html>\n"
    )
