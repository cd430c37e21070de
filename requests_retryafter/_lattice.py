"""Windows on the clock: whether a host's windows form a fixed lattice of epoch time.

From the window starts that recent rejection episodes located (between a refusal and the next
success, or to the second by an obeyed header) and the window a new episode measured, it
decides whether the window is exactly one of the lengths servers use, and where the lattice
lies when the lattice is the host's own (not one of the client's making).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

from ._context import HostContext
from .state import Observation

__all__ = ["aligned", "into"]

#: Less than this before a window start on the lattice is at it: epoch seconds carry about
#: a microsecond of rounding, and a window start located at a recovery, computed once from
#: the episode's times and once from the clock, differs from it by that much.
HAIR = 1e-3


def into(wall: float, start: float, period: float) -> float:
    """Seconds from the latest window start at or before ``wall`` on the lattice of
    ``period`` through ``start``. A start a :data:`HAIR` after ``wall`` counts as at it:
    rounded, it is the same moment, and taken for a window ending it would end the window
    that has just begun."""
    behind = (wall - start) % period
    return 0.0 if behind > period - HAIR else behind


def aligned(
    ctx: HostContext,
    window: float,
    shortest: float,
    longest: float,
    obs: Observation,
    wall: float,
    cycle: Optional[Tuple[float, float]] = None,
) -> Optional[Tuple[float, Optional[float]]]:
    """``(period, a window start)`` when the host's windows are a fixed lattice (the
    start ``None`` when the lattice may be of our own making, see below), given the host's
    state in ``ctx``.

    A period of ``Tuning.round_periods`` must fit the learned ``window``: within
    ``round_tolerance`` of it, or twice that where this episode's evidence allows
    (anywhere from ``shortest`` to ``longest``), or lie in ``cycle``, the range the time
    from the previous recovery to this one allows (from the earliest to the latest the
    two window starts can be); and the window starts located by the recent episodes (this
    one included) must all fit one lattice of that period: two of them at least for a
    period that only ``cycle`` allows, and then they must fit it ``lattice_odds`` times
    better than any other length that the cycle or the window allows (see
    :func:`_fit_share`; evidence that fits two alike picks neither). The start
    returned is the latest the evidence allows (a period begun late loses a little; one
    begun early is refused).

    A window start is located by an episode's bracket (from its last refusal to its
    recovery) at most ``bracket_share`` of the period wide, or by wider brackets that all
    fit the lattice and together leave no more than that. A period that every bracket fits
    is preferred to one that only the narrow ones fit: the wider brackets are recoveries
    found late, which on a clock window still bracket a window start, but on a sliding
    window bracket no start at all.
    """
    t = ctx.tuning
    tolerance = t.round_tolerance * window
    near = [
        r
        for r in t.round_periods
        if abs(r - window) <= tolerance
        or (shortest <= r <= longest and abs(r - window) <= 2 * tolerance)
    ]
    spanned = [r for r in t.round_periods if cycle and cycle[0] <= r <= cycle[1]]
    periods = sorted(
        (r for r in set(near) | set(spanned) if r >= ctx.policy.min_sleep),
        key=lambda r: abs(r - window),
    )
    recent = [
        (o, _window_start(o, ctx.policy.plausible_wait))
        for o in (*ctx.state.observations[-ctx.policy.window :], obs)
    ]
    #: The periods the located starts fit, with the share of each one's lattice they leave
    #: (see _fit_share), once asked.
    fitting: Optional[Dict[float, float]] = None
    for every in (True, False):
        for period in periods:
            found = _on_lattice(ctx, period, recent, wall, 1 if period in near else 2, every)
            if found is None:
                continue
            if period not in near:
                if fitting is None:
                    fitting = {r: share for r in periods if (share := _fit_share(r, recent))}
                share = fitting.get(period, 0.0)
                if any(
                    other != period and share < t.lattice_odds * fit
                    for other, fit in fitting.items()
                ):
                    # Only the cycle allows this period, and the window starts fit another
                    # length the evidence allows nearly as well: two wide brackets meet on
                    # some lattice by chance (brackets of 4.3 and 4.9 s fit one of 20 s,
                    # within 0.3 s, and the host's 15 s with 3.9 s to spare). Evidence that
                    # fits two lattices alike picks neither.
                    continue
            return found
    return None


def _fit_share(period: float, recent: _Located) -> float:
    """The share of a lattice of ``period``'s phases where window starts can lie, once every
    start the ``recent`` episodes located (in a bracket no wider than ``period``) is
    intersected (0 when they fit no one lattice of it). Were the lattice's phase unknown,
    it is the chance that the starts would fit it: the host's own lattice leaves them as
    much room as their brackets' errors, one they meet by chance a sliver."""
    phases: _Phases = [(0.0, period)]
    for phases in _narrowed(period, recent, period):
        if not phases:
            return 0.0
    return sum(high - low for low, high in phases) / period


def _narrowed(period: float, recent: _Located, widest: float) -> Iterator[_Phases]:
    """Where window starts can lie (mod ``period``) after each of the ``recent`` episodes'
    brackets no wider than ``widest`` is intersected with those before it; the last is
    empty if they leave no phase (the starts are off every lattice of ``period``)."""
    phases: _Phases = [(0.0, period)]
    for _, bracket in recent:
        if bracket is None or bracket[1] - bracket[0] > widest:
            continue
        phases = _intersect(phases, _arcs(bracket[0], bracket[1] - bracket[0], period))
        yield phases
        if not phases:
            return


#: The recent episodes, each with the window start it located (see ``_window_start``).
_Located = List[Tuple[Observation, Optional[Tuple[float, float]]]]
#: Intervals of phase (mod a period), sorted.
_Phases = List[Tuple[float, float]]


def _on_lattice(
    ctx: HostContext, period: float, recent: _Located, wall: float, least: int, every: bool
) -> Optional[Tuple[float, Optional[float]]]:
    """``(period, a window start)`` if at least ``least`` window starts located by the
    ``recent`` episodes fit one lattice of ``period`` and none is off it; of every episode's
    bracket if ``every``, else of the narrow ones only (see :func:`aligned`)."""
    t = ctx.tuning
    phases: _Phases = [(0.0, period)]  # where window starts can lie, mod period
    located = 0
    for phases in _narrowed(period, recent, period if every else t.bracket_share * period):
        if not phases:
            return None  # window starts off the lattice: not a fixed lattice
        if _span(phases, period)[1] <= t.bracket_share * period:
            located += 1  # the brackets so far pin a window start
    if located < least:
        return None
    # Our own bursts, sent at each recovery, put a sliding window's starts on a lattice
    # too, but one of our making: tomorrow's run starts elsewhere. The lattice is the
    # host's own (a clock minute) only if a window start came sooner after our last
    # recovery than a whole window (a run's first, partial window shows it). For a worker
    # alone, a recovery sooner than a window after the cycle's first request went proves
    # it: a window that request opened began when it arrived, and ends no sooner (a
    # millisecond of slack for the rounding of stored times). Another worker's request
    # may have opened it sooner. The lattice may show it where a bracket alone does
    # not: a start between 8.8 and 21 s after our first request, on a lattice that only
    # allows 8.8 to 13.3 s of that; but a lattice of our making drifts (each of its
    # windows starts as late as the recovery before it was found), and the starts it
    # allows can come a little sooner than ours did, so only a start well within the
    # window (``host_lattice``) counts.
    previous = ctx.state.limit
    hosts = any(
        o.recovered is not None
        and not o.at_random
        and o.served
        and (
            (ctx.share <= 1 and o.span + o.recovered < period - HAIR)
            or _start_in(o, bracket, phases, period) - (o.at - o.span) <= t.host_lattice * period
        )
        for o, bracket in recent
    )
    kept = previous is not None and previous.anchor is not None and previous.window == period
    if not (hosts or kept):
        return period, None
    # The latest start the evidence allows, at or before this recovery.
    latest = sum(_span(phases, period)) % period
    return period, wall - into(wall, latest, period)


def _start_in(
    o: Observation,
    bracket: Optional[Tuple[float, float]],
    phases: List[Tuple[float, float]],
    period: float,
) -> float:
    """The latest window start in ``o``'s ``bracket`` that ``phases`` (mod ``period``)
    allow, or ``o``'s recovery where they allow none."""
    until = o.at + (o.recovered or 0.0)
    back = min(0.0 if x < until % period <= y else (until - y) % period for x, y in phases)
    return until - back if bracket is not None and until - back > bracket[0] else until


def _arcs(after: float, width: float, period: float) -> List[Tuple[float, float]]:
    """The phases (mod ``period``) from ``after`` to ``after + width``, as intervals."""
    low = after % period
    if low + width <= period:
        return [(low, low + width)]
    return [(low, period), (0.0, low + width - period)]


def _intersect(
    a: List[Tuple[float, float]], b: List[Tuple[float, float]]
) -> List[Tuple[float, float]]:
    """Where two sets of phase intervals overlap."""
    both = [(max(x, u), min(y, v)) for x, y in a for u, v in b]
    return sorted((x, y) for x, y in both if x < y)


def _span(phases: List[Tuple[float, float]], period: float) -> Tuple[float, float]:
    """``(start, width)`` of the shortest arc of the circle of ``period`` covering ``phases``
    (sorted intervals): the arc leaves out the widest gap between them."""
    gaps = [(phases[0][0] + period - phases[-1][1], phases[0][0])]
    gaps += [(b[0] - a[1], b[0]) for a, b in zip(phases, phases[1:])]
    gap, start = max(gaps)
    return start, period - gap


def _window_start(o: Observation, plausible_wait: float) -> Optional[Tuple[float, float]]:
    """Where a rate-limit episode located a window start: ``(after, no later than)``, epoch s
    (none for a refusal taken for one at random, ``Observation.at_random``)."""
    if o.recovered is None or o.status not in (429, 503) or o.at_random:
        return None
    if o.status == 503 and o.recovered > plausible_wait:
        return None  # a maintenance, not a window
    after = o.at + o.failed_until
    obeyed = o.header is not None and o.header - HAIR <= o.recovered <= o.header + 1.0
    if not o.failed_until and obeyed:
        # A header obeyed with no refusal after it: the window started within the second
        # before the end of the wait (headers count whole seconds). A retry sooner than the
        # header asked (a wait clamped to the recoveries seen) brackets its whole wait.
        after = o.at + o.recovered - 1.0
    return after, o.at + o.recovered
