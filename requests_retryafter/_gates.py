"""The host's gates: the shared wait before its next request may go, and its hold.

Both are kept in the host's state as epoch seconds (so other workers and later runs honour
them) and counted down here on the monotonic clock; this adapter's own waits (a rejection's,
a stated reset's) are kept on the monotonic clock alone.
"""

from __future__ import annotations

from typing import Optional, Tuple

from ._context import HostContext
from ._pacer import Pacer
from .decisions import Decision, Event

__all__ = ["Gates"]


class _Countdown:
    """A wait or hold that the state keeps as epoch seconds (so other processes and later runs
    honour it), counted down in this process on the monotonic clock.

    The first time this process sees an end time, what is left of it is fixed as
    ``min(until - now, until - since, cap)``: never longer than the wait was granted for
    (``since`` is when it was granted), whatever the wall clock did since (an NTP step back, a
    resumed VM), and never longer than ``cap``. From then on it runs on monotonic time.
    """

    __slots__ = ("ends", "until")

    def __init__(self) -> None:
        self.until = 0.0
        self.ends = 0.0

    def left(
        self,
        until: float,
        since: float,
        cap: float,
        mono: Optional[float],
        wall: float,
        after: float = 0.0,
    ) -> float:
        """Seconds left of the wait ending at epoch ``until``, and ``after`` seconds more
        (0 when over)."""
        if until <= 0:
            return 0.0
        granted = until - since if 0 < since <= until else cap
        left = min(until - wall, granted, cap)  # (negative: over that long ago)
        if mono is None:
            return max(0.0, left + after)
        if until != self.until:
            self.until, self.ends = until, mono + left
        return max(0.0, self.ends + after - mono)


class Gates:
    """The shared wait and the hold of one host, as this adapter counts them down.

    Args:
        ctx: the host's shared state and settings.
        pacer: the host's pacer (whether workers share it on one schedule).
    """

    def __init__(self, ctx: HostContext, pacer: Pacer) -> None:
        self.ctx = ctx
        self._pacer = pacer
        #: Monotonic time before which no request may go (this adapter's own wait).
        self.not_before = 0.0
        #: Monotonic time until which an answer saying none remains holds the next request
        #: (the reset it states; part of ``not_before``).
        self.stated_until = 0.0
        self._blocked = _Countdown()
        self._hold = _Countdown()

    def decided(self, decision: Decision, mono: float, wall: float) -> None:
        """A rejection's ``decision``, taken at ``mono``/``wall``: no request before its
        wait ends, here and (as the host's shared wait, kept with its state) for the
        workers sharing the host; a hold is the host's hold, kept alike."""
        ctx = self.ctx
        if decision.event == Event.HOLD:
            ctx.state = ctx.state.replace(
                held_until=decision.until,
                held_since=wall,
                hold_reason=decision.reason,
                updated_at=wall,
            )
        self.wait_until(mono + decision.wait)
        if wall + decision.wait > ctx.state.blocked_until:
            ctx.state = ctx.state.replace(blocked_until=wall + decision.wait, blocked_since=wall)
        ctx.state = ctx.state.replace(updated_at=wall)
        ctx.dirty = True

    def wait_until(self, mono: float, stated: bool = False) -> None:
        """No request before ``mono`` (monotonic); ``stated``: the host's stated reset."""
        self.not_before = max(self.not_before, mono)
        if stated:
            self.stated_until = max(self.stated_until, mono)

    def clear(self, mono: float) -> bool:
        """Whether nothing holds a worker alone's request back at ``mono`` (monotonic), as
        this adapter last counted the host's hold and shared wait down (:meth:`check`): each
        ran out, or was never set, and so did this adapter's own wait. ``False`` when in
        doubt (a wait set since it was last counted down): :meth:`check` then counts."""
        state, hold, blocked = self.ctx.state, self._hold, self._blocked
        held, until = state.held_until, state.blocked_until
        return (
            self.not_before <= mono
            and (held <= 0 or (held == hold.until and hold.ends <= mono))
            and (until <= 0 or (until == blocked.until and blocked.ends <= mono))
        )

    def check(self, wall: float, mono: Optional[float]) -> Tuple[float, str, float]:
        """``(hold's seconds left, its reason, the shared wait)`` at ``wall``.

        A hold lasts at most ``max_hold`` and no longer than it was granted for. A shared wait
        longer than this adapter's ``max_sleep`` (set by another worker with a larger
        ``max_sleep``, or kept in the store) is a hold too: no single sleep exceeds
        ``max_sleep``."""
        p, state = self.ctx.policy, self.ctx.state
        left = self._hold.left(state.held_until, state.held_since, p.max_hold, mono, wall)
        if left > 0:
            return left, state.hold_reason, 0.0
        wait = self.shared_wait(wall, mono)
        if wait > p.max_sleep:
            why = (
                f"the host's wait ends in {wait:.0f} s, longer than this adapter's max_sleep "
                f"({p.max_sleep:g} s)"
            )
            return wait, why, 0.0
        return 0.0, "", wait

    def shared_wait(self, wall: float, mono: Optional[float]) -> float:
        """Seconds before a request may go: the host's shared wait (other workers' too) and
        this adapter's own."""
        ctx, state = self.ctx, self.ctx.state
        after = 0.0
        if ctx.share > 1 and self._pacer.send_gap() is None:
            # Workers sharing a host's wait (and no schedule yet) come back from it in turns,
            # spread by rank over one floor: all at once, a host that refills one request at
            # a time (a token bucket without a burst) lets one through and refuses the rest,
            # and each of those refusals sets the wait again for all of them. The turn
            # counts from the wait's end, by the rank known when the worker looks again: a
            # worker that was refused together with the others knew none of them yet when
            # it chose its own wait, and its turn was lost once the shared wait was over.
            after = ctx.policy.min_sleep * ctx.rank / ctx.share
        shared = self._blocked.left(
            state.blocked_until, state.blocked_since, ctx.policy.max_hold, mono, wall, after
        )
        return max(shared, 0.0 if mono is None else self.not_before - mono)

    def at_stated_reset(self, mono: float, wait: float) -> bool:
        """Whether a wait of ``wait`` s before a request at ``mono`` ends at the reset the
        host stated after it said none remains, not later."""
        return wait > 0 and self.stated_until >= mono + wait - 1e-9
