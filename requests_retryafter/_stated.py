"""Stated limits: what a host's answers say of its limit, taken as evidence, never as orders.

From the ``RateLimit*`` and ``X-RateLimit-*`` fields of each answer it keeps the stated rate
(a first estimate while nothing was learned, and the documented figure for reports), whether
the host states what remains of its window (those statements then pace it), and the closest
bound on the window's reset (stated resets are whole seconds, rounded up), which an answer
saying ``remaining=0`` waits for. Absurd statements are ignored.
"""

from __future__ import annotations

from typing import Optional

from ._context import ENGINE_LOG, HostContext, replace_limit
from .parsing import RateLimitInfo
from .state import MAX_RATE, MAX_SECONDS, LimitEstimate

__all__ = ["StatedLimits"]


class StatedLimits:
    """What one host states of its limit.

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._ignored_statement = ""
        # The earliest moment (monotonic) the host's stated reset can be, from every answer
        # since the last one: each stated reset is whole seconds, rounded up, so each answer
        # bounds the reset from above, and the smallest bound is the closest.
        self._reset_by: Optional[float] = None
        #: Whether the host's last 2xx stated what remains of its window and when it resets:
        #: those statements then pace it (a stated rate alone is paced evenly).
        self.counted = False

    def observe(self, info: RateLimitInfo, mono: float, wall: float) -> float:
        """Take the statement ``info`` of a 2xx at ``mono``/``wall`` as evidence; return the
        seconds the next request must wait for the stated reset (0: none).

        A stated rate seeds the learned limit only while nothing was learned; it is always
        kept as the documented figure. ``Remaining: 0`` waits for the closest bound on the
        reset, within ``max_sleep``.
        """
        ctx = self.ctx
        absurd = self._absurd(info)
        if absurd:
            if absurd != self._ignored_statement:
                self._ignored_statement = absurd
                ENGINE_LOG.info("%s: stated limit ignored: %s", ctx.host, absurd)
            return 0.0
        if info.limit and info.window:
            documented = info.limit / info.window
            limit = ctx.state.limit
            if limit is None:
                ctx.set_limit(
                    LimitEstimate(documented, info.window, documented, wall, "stated"), wall
                )
            elif limit.documented != documented:
                ctx.state = ctx.state.replace(limit=replace_limit(limit, documented=documented))
                ctx.dirty = True
        self.counted = info.remaining is not None and info.reset_after is not None
        if info.reset_after is not None and info.reset_after >= 0:
            stated = mono + info.reset_after
            if self._reset_by is None or mono >= self._reset_by or stated < self._reset_by:
                self._reset_by = stated  # a new window, or a closer bound on this one's end
        if info.remaining == 0 and self._reset_by is not None:
            # Wait for the closest bound on the reset, not for the one this answer states
            # (a reset rounded up from 0.2 s reads 1 s: on a 1 s window, waiting for it would
            # halve the rate).
            return min(self._reset_by - mono, ctx.policy.max_sleep)
        return 0.0

    def _absurd(self, info: RateLimitInfo) -> str:
        """Why a stated limit cannot be meant (and so is no evidence), or ``""``."""
        p = self.ctx.policy
        if info.window is not None and info.window > p.max_hold:
            return f"a window of {info.window:.0f} s is longer than max_hold ({p.max_hold:g} s)"
        if info.limit is not None and info.window and info.limit / info.window > MAX_RATE:
            return f"{info.limit} requests per {info.window:g} s is more than any host answers"
        if info.reset_after is not None and info.reset_after > MAX_SECONDS:
            return f"a reset in {info.reset_after:.0f} s is later than any clock reaches"
        return ""
