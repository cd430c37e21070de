"""Whether a host's statements pace it: the evidence that takes a host from the pace of its
statements (a burst while some remain, a wait for the reset once none does) to an even one.

Statements pace a host at its stated rate when its windows free their budget at the reset
they state: a fixed window starts afresh, a moving window lets go the requests it counted
(which went together, as the statements paced them). Some hosts free places a little at a
time instead: a sliding window counter (``limits``' and Flask-Limiter's, Cloudflare's,
Kong's) weighs its last window's count on the next until that one ends, so a budget sent at
a window's start keeps most of the next window shut, and a wait for its reset frees a place
or a few. And some state their resets late (``limits`` rounds an epoch reset that falls on
a whole second up to the next one: two seconds off, on a window of one). Paced by their
statements, a sliding window counter of 10 a second gave 5 a second; paced evenly, 9 or more.

Two kinds of evidence, each judged only while no reset is predicted (a prediction paces a
moving window a place at a time, so that its requests go apart, and its reset frees only
the oldest; a predicted reset refused, or answers that contradict the bounds on the
windows' length, stop predictions):

- a wait for a stated reset freed fewer places than the host's limit (the first answer
  after it says so);
- over ``Tuning.reset_judged`` waits for stated resets, fewer 2xx came than an even pace at
  ``utilization`` of the stated rate would have sent, and the waits account for it (without
  them the run would have been at least as fast: not a client slow on its own).

Either paces the host evenly at ``utilization`` of its stated rate from then on (a limit
marked even, stored with the host): its statements then pace nothing, and a refusal slows
the pace as on any evenly paced host. Only for a worker alone, with no other client's
requests seen counted, on windows shorter than ``Tuning.spread_below`` (longer ones lose at
most a second of each window to a reset rounded up).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Deque, Optional, Tuple

from ._context import ENGINE_LOG, HostContext
from .state import LimitEstimate

__all__ = ["StatedPace"]


class StatedPace:
    """The judgement of whether one host's statements pace it (see the module).

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        # When the last wait for a stated reset ends (monotonic), until the first answer to
        # a request sent after it says how much it freed.
        self._judged_from: Optional[float] = None
        # The 2xx that stated what remains, and the seconds waited for stated resets, so
        # far; and ``(monotonic, 2xx, waited)`` at the last answers that said none remains.
        self._answers = 0
        self._waited = 0.0
        self._run_outs: Deque[Tuple[float, int, float]] = deque(maxlen=ctx.tuning.reset_judged + 1)
        # Whether another client's requests were seen counted: what the run got is then not
        # the run's to judge.
        self._others = False
        self._even: Optional[LimitEstimate] = None

    @property
    def pending(self) -> bool:
        """Whether the host is to be paced evenly from the next request (see :meth:`take`)."""
        return self._even is not None

    def answered(
        self, limit: Optional[int], remaining: int, sent: float, wall: float, predicting: bool
    ) -> None:
        """A 2xx to a request sent at ``sent`` said ``remaining`` of ``limit`` remain;
        ``predicting``: resets are predicted from the answers' bounds."""
        self._answers += 1
        if self._judged_from is None or sent < self._judged_from - 1e-3:
            return
        self._judged_from = None
        # The first answer after a wait for the stated reset: it freed ``remaining + 1``
        # places (this request took one). A window's reset frees its whole budget.
        if limit and remaining + 1 < limit and not predicting:
            self._uneven(
                limit,
                f"a wait for its stated reset freed {remaining + 1} of its {limit} places",
                wall,
            )

    def ran_out(
        self,
        limit: Optional[int],
        mono: float,
        wall: float,
        wait: float,
        *,
        stated: bool,
        predicting: bool,
    ) -> None:
        """An answer at ``mono`` said none of ``limit`` remains, and the next request waits
        ``wait`` s: for the reset the host states (``stated``), or one predicted. Judge the
        pace the stated resets gave since the answer that said so ``Tuning.reset_judged``
        times before."""
        if stated:
            self._judged_from = mono + wait  # what the reset frees shows what the host is
        run_outs = self._run_outs
        run_outs.append((mono, self._answers, self._waited))
        self._waited += wait
        whole = self.ctx.stated
        if (
            len(run_outs) <= self.ctx.tuning.reset_judged
            or predicting
            or not limit
            or whole is None
            or whole.window is None
        ):
            return
        since, answers, waited = run_outs[0]
        span, served = mono - since, self._answers - answers
        rate = self.ctx.policy.utilization * limit / whole.window
        waits = self._waited - wait - waited
        if served < rate * span and waits >= span - served / rate:
            self._uneven(
                limit, f"paced by its stated resets, {served} answers came in {span:.1f} s", wall
            )

    def refused(self) -> None:
        """A rejection came: the pace is judged afresh from the next answer that says none
        remains."""
        self._judged_from = None
        self._run_outs.clear()

    def shared(self) -> None:
        """Another client's requests were seen counted in the host's windows."""
        self._others = True

    def take(self) -> Optional[LimitEstimate]:
        """The limit to pace the host evenly at, if an answer just showed its statements do
        not pace it (once: the next call returns ``None``)."""
        even, self._even = self._even, None
        return even

    def _uneven(self, limit: int, why: str, wall: float) -> None:
        """The host's statements are shown not to pace it (``why``): pace it evenly at
        ``utilization`` of its stated rate, ``limit`` per the stated window."""
        ctx, t = self.ctx, self.ctx.tuning
        whole = ctx.stated
        if (
            whole is None
            or whole.window is None
            or whole.window >= t.spread_below
            or ctx.share > 1
            or self._others
        ):
            return
        share = ctx.policy.utilization
        # Windows enough that a probe's step (``probe_step`` more) is a whole request: a
        # request more in one window of 5 asked for 20 % more, and was refused every time.
        windows = max(1, math.ceil(1.0 / (t.probe_step * limit)))
        window = windows * whole.window / share
        burst = windows * limit
        self._even = LimitEstimate(
            burst / window, window, limit / whole.window, wall, burst=burst, even=True
        )
        ENGINE_LOG.info(
            "%s: %s, fewer than its stated rate would give: paced evenly at %.3g requests/s "
            "(%.0f %% of its stated rate) from now on",
            ctx.host,
            why,
            burst / window,
            100 * share,
        )
