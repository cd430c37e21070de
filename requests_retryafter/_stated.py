"""Stated limits: what a host's answers say of its limit, taken as evidence, never as orders.

From the ``RateLimit*`` and ``X-RateLimit-*`` fields of each answer it keeps the stated rate
(a first estimate while nothing was learned, and the documented figure for reports), whether
the host states what remains of its window (those statements then pace it), and the closest
bound on the window's reset (stated resets are whole seconds, rounded up), which an answer
saying ``remaining=0`` waits for. Absurd statements are ignored.

Many limiters open a window at a request (a fixed window counted from its first hit, a moving
window from its oldest request) and state its reset as an epoch second rounded up: every
answer of the window then states the same moment, up to a second late, and on a 1 s window
waiting for it costs a third of the rate or more. So the answer to the first request of a
window opened right after another ran out (``remaining`` one below ``limit``) is also taken
as a bound on the window's length: more than the reset it states less a second, at most that
reset. The bounds of successive windows are intersected, and while two or more agree, a
window that runs out is waited for until its first answer plus the longest length they allow
(plus ``Tuning.reset_margin``), when that comes before the stated reset. Windows opened at
the same phase each time never narrow the bounds, so a short window is probed once at the
whole second they allow (window lengths are whole seconds): a probe that passes shows the
window's length. Windows on the clock give bounds that disagree, or a refused probe; a
refusal at a predicted moment stops predictions for the host, so predicting costs a host at
most one refusal a run.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

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
        # The answer (monotonic) to the current window's first request, and the bounds
        # ``(low, high]`` on a window's length that the first answers of windows agree on.
        self._opened: Optional[float] = None
        self._length: Optional[Tuple[float, float]] = None
        self._agreeing = 0
        # Whether a window ran out (``remaining=0``) since the last window's first answer:
        # only a window opened right after its reset bounds the length (the run's first
        # request may fall anywhere in a window on the clock).
        self._ran_out = False
        # Whether the host was last waited for until a predicted reset, with no 2xx since;
        # and the window length that wait probed, if it was a probe.
        self._predicted = False
        self._probed: Optional[float] = None
        #: Whether resets are predicted from windows' first answers (until one is refused).
        self.predicts = True

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
            if info.limit is not None and info.remaining == info.limit - 1:
                # The window's first request: a new window, and a bound on its length.
                self._opened_at(info, mono, wall)
                self._reset_by = stated
            elif self._reset_by is None or mono >= self._reset_by or stated < self._reset_by:
                self._reset_by = stated  # a new window, or a closer bound on this one's end
        self._probed = None  # a probe's answer is the first 2xx after it, an opener or not
        if info.remaining != 0:
            return 0.0
        self._ran_out = True
        if self._reset_by is not None:
            # Wait for the closest bound on the reset, not for the one this answer states
            # (a reset rounded up from 0.2 s reads 1 s: on a 1 s window, waiting for it would
            # halve the rate), or for the reset the windows' lengths predict, if sooner.
            reset = self._reset_by
            predicted, probe = self._predicted_reset(mono)
            if predicted is not None and predicted < reset:
                reset = predicted
                self._predicted = True
                self._probed = probe
            # One prediction per window's first answer: a moving window that ran out again
            # soon after its reset holds newer requests than that one.
            self._opened = None
            return min(reset - mono, ctx.policy.max_sleep)
        return 0.0

    def served(self) -> None:
        """A 2xx came: the last predicted reset (if any) held."""
        self._predicted = False

    def refused(self) -> None:
        """A rejection came: if the host was waited for until a predicted reset, its windows
        do not open at a request (they follow the clock, or another client shares them), and
        only stated resets are waited for from now on."""
        if self._predicted:
            self._predicted = False
            self.predicts = False
            ENGINE_LOG.info(
                "%s: refused at a reset predicted from its windows' first answers; waiting "
                "for the resets it states from now on",
                self.ctx.host,
            )

    def _opened_at(self, info: RateLimitInfo, mono: float, wall: float) -> None:
        """The answer at ``mono`` to a window's first request states a reset
        ``info.reset_after`` seconds on. If the window before it ran out, it opened at its
        reset, and it is longer than ``reset_after - 1`` and at most ``reset_after`` (rounded
        up to a whole second): intersect with the bounds so far, or start again from these
        when they disagree."""
        self._opened = mono
        if not self._ran_out:
            return
        self._ran_out = False
        self._seed()
        if self._probed is not None and self._length is not None:
            # The window probed was over by then: it is that whole second long.
            self._length = (self._length[0], min(self._length[1], self._probed))
            if info.limit:
                self._shown(info.limit, self._probed, wall)
        assert info.reset_after is not None
        fresh = (info.reset_after - 1.0, info.reset_after)
        if self._length is not None:
            low, high = max(fresh[0], self._length[0]), min(fresh[1], self._length[1])
            if low < high:
                self._length = (low, high)
                self._agreeing += 1
                return
        self._length, self._agreeing = fresh, 1

    def _seed(self) -> None:
        """Start from the window the host's limit states (stated, or shown by an earlier
        probe), if nothing was bounded yet: the next run predicts from its first window."""
        limit = self.ctx.state.limit
        window = limit.window if limit is not None and limit.source == "stated" else None
        if self._length is None and window is not None and window >= 1.0:
            self._length = (window - 1.0, window)
            self._agreeing = 2

    def _shown(self, limit: int, window: float, wall: float) -> None:
        """A probe showed the host's windows are ``window`` long: keep ``limit`` per
        ``window`` as its stated limit (the documented figure, and the learned limit while
        nothing else was learned), so that the next run starts from it."""
        ctx = self.ctx
        rate = limit / window
        current = ctx.state.limit
        if current is None:
            ctx.set_limit(LimitEstimate(rate, window, rate, wall, "stated"), wall)
        elif current.documented is None:
            ctx.state = ctx.state.replace(limit=replace_limit(current, documented=rate))
            ctx.dirty = True
        ENGINE_LOG.info(
            "%s: its windows of %d requests are %g s long: a reset predicted at that length held",
            ctx.host,
            limit,
            window,
        )

    def _predicted_reset(self, mono: float) -> Tuple[Optional[float], Optional[float]]:
        """The current window's reset as its first answer and the agreed length predict it,
        and the whole second probed (if the prediction is a probe); ``None`` when there is
        none or its moment has passed (the window did not open at that request).

        Windows are whole seconds long. While a whole second lies inside the bounds, short of
        their upper end, a window of at most ``Tuning.reset_probe_below`` is probed at that
        length: windows opened at the same phase each time never narrow the bounds by
        themselves (a window of 1 s opened just after a whole second looks the same as one
        of 2 s on the clock). A probe that passes shows the window is that long; one refused
        stops predictions.
        """
        self._seed()
        if not self.predicts or self._agreeing < 2 or self._opened is None:
            return None, None
        assert self._length is not None
        low, high = self._length
        t = self.ctx.tuning
        whole = float(math.floor(high))
        probe = whole if low < whole < high and high <= t.reset_probe_below else None
        at = self._opened + (high if probe is None else probe) + t.reset_margin
        return (at, probe) if at > mono else (None, None)

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
