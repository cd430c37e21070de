"""What the parts of one host's engine share: the host's state and the adapter's settings.

The pacer, the decider, the limit learner and the stated-limit reader each keep their own
bookkeeping; what they all read (the host's :class:`~requests_retryafter.state.HostState`, the
policy, the thresholds, this worker's share) lives here, in one small mutable object owned by
the host's :class:`~requests_retryafter.engine.HostTracker`.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Any, Optional

from .policy import Policy
from .state import MAX_COUNT, MAX_LIMIT_HISTORY, MAX_RATE, MIN_WINDOW, HostState, LimitEstimate
from .tuning import Tuning

__all__ = ["ENGINE_LOG", "HostContext", "replace_limit"]

#: The engine's one logger, whichever of its parts logs (users configure it by this name).
ENGINE_LOG = logging.getLogger("requests_retryafter.engine")


class HostContext:
    """One host's state and settings, shared by the parts of its engine.

    Args:
        state: the host's state to start from (from the store, or a new one).
        policy: the adapter's policy.
        rng: the random source for jitter.
        worker: this adapter's id among the workers sharing a store.
        tuning: the engine's thresholds.
    """

    __slots__ = (
        "counted",
        "dirty",
        "host",
        "policy",
        "rank",
        "rng",
        "share",
        "state",
        "stated",
        "tuning",
        "worker",
    )

    def __init__(
        self, state: HostState, policy: Policy, rng: random.Random, worker: str, tuning: Tuning
    ) -> None:
        self.state = state
        self.policy = policy
        self.rng = rng
        self.worker = worker
        self.tuning = tuning
        self.host = state.host
        #: Workers pacing this host together (1 unless a shared store says otherwise), and
        #: this worker's rank among them.
        self.share = 1
        self.rank = 0
        #: Whether the state changed in a way worth writing to the store soon.
        self.dirty = False
        #: Whether the host's last 2xx stated what remains of its window and when it resets
        #: (:mod:`._stated`): those statements then pace it, not a stated rate, and workers
        #: sharing the host are not paced by a budget one of them learned (short windows go
        #: on their shared schedule at the stated budget: see ``Pacer.send_gap``).
        self.counted = False
        #: What the host's statements say of its whole limit (every client's requests
        #: counted): its stated budget per the window its answers show, or ``None``
        #: (:meth:`~requests_retryafter._stated.StatedLimits.observe`).
        self.stated: Optional[LimitEstimate] = None

    def set_limit(self, limit: LimitEstimate, wall: float) -> None:
        """Adopt ``limit`` as the host's learned limit (and note it in the limit's history).
        A limit beyond what a store keeps (a rate over ``MAX_RATE``, a budget over
        ``MAX_COUNT``, a window under ``MIN_WINDOW``) is not adopted: a store would drop the
        whole state of the host. A lower bound of its window under ``MIN_WINDOW`` bounds
        nothing a store keeps, and is dropped (measured from requests a few microseconds
        apart, it lost a host's whole state between two runs, and the next started cold)."""
        if (
            limit.rate > MAX_RATE
            or (limit.burst or 0) > MAX_COUNT
            or (limit.window is not None and limit.window < MIN_WINDOW)
        ):
            ENGINE_LOG.warning(
                "%s: a limit of %.3g requests/s not kept: beyond any host's", self.host, limit.rate
            )
            return
        if limit.shortest is not None and limit.shortest < MIN_WINDOW:
            limit = replace_limit(limit, shortest=None)
        old = self.state.limit
        if limit.opening is None and old is not None and old.opening is not None:
            # What the host let through at once when idle is no measure of its window: a
            # limit learned anew keeps it (see _opening).
            limit = replace_limit(limit, opening=old.opening, opening_clock=old.opening_clock)
        history = (*self.state.limit_history, (wall, round(limit.rate, 6)))[-MAX_LIMIT_HISTORY:]
        self.state = self.state.replace(limit=limit, limit_history=history, updated_at=wall)
        self.dirty = True
        ENGINE_LOG.debug("%s: limit now %.3f requests/s (%s)", self.host, limit.rate, limit.source)


def replace_limit(limit: LimitEstimate, **changes: Any) -> LimitEstimate:
    """``limit`` with ``changes`` (a frozen dataclass's copy)."""
    return dataclasses.replace(limit, **changes)


def kept_share(served: int, depth: float = 1.0) -> float:
    """The share of its pace that a host refusing once, after ``served`` successes since the
    last refusal, allows: ``depth`` of those ``served + 1`` requests were over its rate (a
    bucket's depth where it showed one, else one request; see ``_learner._cut``)."""
    return 1.0 - depth / (served + 1)
