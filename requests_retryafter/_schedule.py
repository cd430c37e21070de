"""The host's shared schedule: when workers sharing a host through a store send on one
schedule (consecutive sends of all of them a gap apart, as one client spaced evenly would),
and its gap.

Pure over the host's context: which workers share the host is :mod:`._workers`' count, and
the search that sets the schedule's rate is :mod:`._search`.
"""

from __future__ import annotations

from typing import Optional, Tuple

from . import _search
from ._context import HostContext

__all__ = ["send_gap"]


def send_gap(ctx: HostContext) -> Optional[Tuple[float, float]]:
    """``(gap, window)`` of the host's shared schedule, for workers sharing a host with a
    learned or stated budget: consecutive sends of all of them at least ``gap`` apart (one
    over the shared search's rate, or over the rate it will start from), so that together
    they send as one client spaced evenly would. ``None`` for one worker alone, a host
    with no budget known, or windows (``Tuning.spread_below`` or longer) whose budget the
    workers split (each share a burst of its own, see ``Pacer.budget``) or whose statements
    pace them (see ``Pacer.reserve``)."""
    if ctx.share < 2 or not ctx.policy.pace:
        return None
    limit, search = ctx.state.limit, ctx.state.search
    if ctx.counted:
        # A host that states what remains of its windows counts every worker's requests,
        # and states its whole budget (``ctx.stated``): with windows shorter than
        # ``spread_below`` the workers send it on the schedule, whose search starts at
        # ``utilization`` of the stated rate, below it as its ceiling (see
        # ``_search.from_stated``); each worker waiting for the resets it states, whole
        # seconds rounded up, lost up to a second of every window. Longer windows, the
        # statements pace (see ``Pacer.reserve``). Not a budget one worker learned either
        # way: that is its share of a window.
        stated = ctx.stated
        if stated is None or stated.window is None:
            return None
        if stated.window >= ctx.tuning.spread_below:
            return None
        if search is None:
            search = _search.from_stated(stated, 0.0, ctx.policy.utilization)
        return 1.0 / search.rate, stated.window
    if search is not None:
        # Once the workers search together, the search sets the pace, whatever limit a
        # worker learned meanwhile from its own answers (which queueing distorts): a
        # window learned so, newer than the search's limit in the store, took every
        # worker off the schedule, and four of them fell to under three requests a
        # second against nginx's ten.
        return 1.0 / search.rate, limit.window if limit is not None and limit.window else 1.0
    if (
        limit is not None
        and not limit.even
        and (limit.window or 0.0) >= ctx.tuning.spread_below
        and (limit.anchor is not None or (limit.burst or 0) > ctx.share)
    ):
        # Windows: each worker sends its share at each window's start (see
        # ``Pacer.budget``), which is exact where the windows were located on the clock, and
        # safe where each share is a burst of its own. A budget no larger than the number of
        # workers gives each one request now and then, at moments of its own that come
        # together at random: such a host, and a token bucket, are paced on the schedule.
        # So is a window shorter than ``spread_below``: from its share, a worker cannot
        # tell it from a token bucket (nginx's with a burst, refusing with `Retry-After:
        # 1`, looks like a window of a second), and a bucket's shares at each window's
        # start kept four workers at 3 to 5 requests a second against its 10. Spread
        # over the window, its budget still fits every span of the window's length.
        return None
    if limit is None or not limit.burst or not limit.window:
        return None
    return limit.window / limit.burst, limit.window
