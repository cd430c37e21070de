"""The workers that pace one host together through a shared store (SQLite, Redis): who they
are, and the host's shared schedule they take turns on.

Each worker records itself in the host's state (a heartbeat), counts the workers whose
heartbeats are recent, and takes its share of the host's limit: its rank among them spreads
their returns from a shared wait, and, once a budget is learned, their sends go on one shared
schedule (:mod:`._search`), whose updates the adapter applies atomically in the store. The
methods that build those updates are pure over the store's entry.
"""

from __future__ import annotations

from typing import Optional, Tuple

from . import _search
from ._context import HostContext
from ._pacer import Pacer
from .state import HostState

__all__ = ["Workers"]


class Workers:
    """The workers sharing one host, as this worker sees them.

    Args:
        ctx: the host's shared state and settings (its ``share`` and ``rank`` are set here).
        pacer: the host's pacer (its bucket depth and shared gap).
    """

    def __init__(self, ctx: HostContext, pacer: Pacer) -> None:
        self.ctx = ctx
        self._pacer = pacer

    def heartbeat(self, wall: float, refusing: bool) -> bool:
        """Record this worker as pacing the host (shared stores), and count the workers;
        whether it was recorded. ``refusing``: the host is in a rejection episode."""
        ctx = self.ctx
        if not ctx.worker or not ctx.policy.pace:
            return False
        state = ctx.state
        if (
            state.limit is None
            and not refusing
            and not state.observations
            and state.blocked_until <= wall
        ):
            return False  # a host that never refused (nor makes anyone wait) needs no pace
        ctx.state = state.with_worker(ctx.worker, wall)
        self.count(wall)
        ctx.dirty = True
        return True

    def leave(self, wall: float) -> bool:
        """Record that this worker stopped pacing the host (its adapter is closing): the
        others take its share from their next read of the store. Whether there was anything
        to record (it was counted among the host's workers)."""
        ctx = self.ctx
        if not ctx.worker:
            return False
        state = ctx.state.with_worker_left(ctx.worker, wall)
        if state is ctx.state:
            return False
        ctx.state = state
        ctx.dirty = True
        return True

    def count(self, wall: float) -> None:
        """Count the workers pacing the host, as the state knows them (after a heartbeat,
        and again once the store's entry is merged in)."""
        ctx = self.ctx
        if not ctx.worker or not ctx.state.workers:
            return
        active = ctx.state.active_worker_ids(wall)
        ctx.share = max(1, len(active))
        ctx.rank = active.index(ctx.worker) if ctx.worker in active else 0

    def take_send(
        self, stored: Optional[HostState], wall: float, *, alone: bool = False
    ) -> Tuple[HostState, float]:
        """Take this worker's send on the host's shared schedule: ``(the state to store, the
        epoch time of the send)``, the shared search moved on first (see
        :func:`~requests_retryafter._search.take_send`). Pure over ``stored`` (the store's
        entry, ``None`` for none): the adapter applies it in one atomic store update.
        ``alone``: the store failed and ``stored`` is this worker's own state (it keeps to
        its share of the rate)."""
        ctx = self.ctx
        # A host that states its whole budget (and counts every worker's requests): the
        # search starts from that, not from one worker's share of it.
        stated = ctx.stated if ctx.counted else None
        return _search.take_send(
            stored or HostState(ctx.host),
            ctx.state.limit,
            wall,
            stated=stated,
            utilization=ctx.policy.utilization,
            depth=self._pacer.depth(),
            min_sleep=ctx.policy.min_sleep,
            max_sleep=ctx.policy.max_sleep,
            share=ctx.share,
            tuning=ctx.tuning,
            alone=alone,
        )

    def early(self, stored: Optional[HostState], wall: float) -> float:
        """Seconds before this worker may take a send on the host's shared schedule (0: now;
        see :func:`~requests_retryafter._search.early`). Pure over ``stored``, like
        :meth:`take_send`."""
        if stored is None:
            return 0.0
        ctx = self.ctx
        policy = ctx.policy
        return _search.early(
            stored,
            ctx.state.limit,
            wall,
            min_sleep=policy.min_sleep,
            max_sleep=policy.max_sleep,
            share=ctx.share,
        )

    def space_send(self, stored: Optional[HostState], wall: float) -> Tuple[HostState, float]:
        """Record this worker's send, about to go on the host's shared schedule at ``wall``:
        ``(the state to store, seconds to wait before sending)``, at least a gap (of the
        stored search's rate) after the last send that went (see
        :meth:`~requests_retryafter.state.HostState.with_send_spaced`). Pure over
        ``stored``, like :meth:`take_send`."""
        state = stored or HostState(self.ctx.host)
        if state.search is not None:
            gap = 1.0 / state.search.rate  # the store's search: newer than this worker's copy
        else:
            shared = self._pacer.send_gap()
            if shared is None:
                return state, 0.0
            gap = shared[0]
        return state.with_send_spaced(min(gap, self.ctx.policy.max_sleep), wall)

    def shared_refusal(
        self,
        stored: Optional[HostState],
        slot_at: float,
        wall: float,
        *,
        first: bool = True,
        resume: Optional[float] = None,
        alone: bool = False,
    ) -> HostState:
        """The stored state after this worker's request, whose slot on the host's shared
        schedule was at ``slot_at`` (epoch s), was refused at ``wall`` (see
        :func:`~requests_retryafter._search.on_refusal`; ``first``: after a success;
        ``resume``: when the workers send again). Pure over ``stored``, like
        :meth:`take_send` (``alone`` as there)."""
        ctx = self.ctx
        state = stored or HostState(ctx.host)
        return _search.on_refusal(
            state,
            ctx.state.limit,
            slot_at,
            wall,
            ctx.tuning,
            first=first,
            resume=resume,
            max_sleep=ctx.policy.max_sleep,
            share=ctx.share,
            alone=alone,
        )
