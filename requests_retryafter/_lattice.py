"""Windows on the clock: whether a host's windows form a fixed lattice of epoch time.

From the window starts that recent rejection episodes located (between a refusal and the next
success, or to the second by an obeyed header) and the window a new episode measured, it
decides whether the window is exactly one of the lengths servers use, and where the lattice
lies when the lattice is the host's own (not one of the client's making).
"""

from __future__ import annotations

from typing import Optional, Tuple

from ._context import HostContext
from .state import Observation

__all__ = ["aligned"]


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
    period that only ``cycle`` allows. The start returned is the latest the evidence
    allows (a period begun late loses a little; one begun early is refused).
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
    for period in sorted(set(near) | set(spanned), key=lambda r: abs(r - window)):
        if period < ctx.policy.min_sleep:
            continue
        found = _on_lattice(ctx, period, obs, wall, 1 if period in near else 2)
        if found is not None:
            return found
    return None


def _on_lattice(
    ctx: HostContext, period: float, obs: Observation, wall: float, least: int
) -> Optional[Tuple[float, Optional[float]]]:
    """``(period, a window start)`` if at least ``least`` located window starts of the
    recent episodes fit one lattice of ``period`` and none is off it (see :func:`aligned`)."""
    t = ctx.tuning
    low, high = -period, period  # the lattice's phase, relative to this recovery
    located = 0
    recent = (*ctx.state.observations[-ctx.policy.window :], obs)
    for o in recent:
        bracket = _window_start(o, ctx.policy.plausible_wait)
        if bracket is None or bracket[1] - bracket[0] > t.bracket_share * period:
            continue
        # Shift the bracket by whole periods to lie about this recovery.
        shift = round((wall - bracket[1]) / period) * period
        low, high = max(low, bracket[0] + shift - wall), min(high, bracket[1] + shift - wall)
        located += 1
        if low >= high:
            return None  # two window starts off the lattice: not a fixed lattice
    if located < least:
        return None
    # Our own bursts, sent at each recovery, put a sliding window's starts on a lattice
    # too, but one of our making: tomorrow's run starts elsewhere. The lattice is the
    # host's own (a clock minute) only if a window start came sooner after our last
    # recovery than a whole window (a run's first, partial window shows it).
    previous = ctx.state.limit
    hosts = any(
        o.recovered is not None and o.served and o.span + o.recovered <= t.host_lattice * period
        for o in recent
    )
    kept = previous is not None and previous.anchor is not None and previous.window == period
    return period, (wall + high if hosts or kept else None)


def _window_start(o: Observation, plausible_wait: float) -> Optional[Tuple[float, float]]:
    """Where a rate-limit episode located a window start: ``(after, no later than)``, epoch s."""
    if o.recovered is None or o.status not in (429, 503):
        return None
    if o.status == 503 and o.recovered > plausible_wait:
        return None  # a maintenance, not a window
    after = o.at + o.failed_until
    if not o.failed_until and o.header is not None and o.recovered <= o.header + 1.0:
        # A header obeyed with no refusal after it: the window started within the second
        # before the end of the wait (headers count whole seconds).
        after = o.at + o.recovered - 1.0
    return after, o.at + o.recovered
