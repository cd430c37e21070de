"""A run's opening on a host paced evenly: the budget a sliding window counter let through at
once when idle, sent at once again, and the turn of the window that burst shuts.

A run's first requests to a host it knows nothing of go unpaced, at once, until the first
refusal. What the host let through then is what it allows when idle: a sliding window
counter (HAProxy's, the ``limits`` library's) is empty, and lets its whole budget through; it
then refuses until its window turns, as a fixed window does. Once the host shows itself such
a counter (``LimitLearner``: a budget sent at once at a window's start, refused partway, see
``Prober.counter``), that burst is kept with the learned limit (``LimitEstimate.opening``),
if it went at once: in less than half the time the host's rate would take to serve it. (A
host with no limit that refuses one request in 500 at random, taken for a counter, let a
long streak through at its own pace before its first refusal; kept as an opening, the wait
for a window's turn after it was lost time, and its next run went at 0.83 of an unpaced
client's pace, where 0.9 and more without it.)

A later run's first requests to a host paced evenly that has one go at once, as many (the
opening); then the host is shut until its window turns. The window is about the opening over
the rate learned (``B / r``), and the host's, where a length servers use, the round one
nearest that (``L``, of ``Tuning.round_periods``). It turns at the first boundary of the
clock in ``L`` after the opening (a window of the clock, as the ``limits`` library counts),
``L`` after the opening's first request (a window that request opened, as HAProxy's), or
``B / r`` after it: the next request goes at the earliest, a margin after it
(``Tuning.located_margin``), and the even pace goes on from there. The answer to a request
that waited for the boundary of the clock says whether the host's windows follow the clock
(``LimitEstimate.opening_clock``): where they were shown not to, later openings wait no more
for it. (Tried there, a window opened by the opening's first request, HAProxy's, refused it,
and a later retry that the host's counter also counted: the second run went at 0.92 of the
ideal rate, where 0.94 without an opening.)

A refusal before a request sent after the opening got through is the opening's, not the
pace's: it teaches nothing of the rate (``LimitLearner`` learns nothing from it), and the
retry goes at the next of those turns; refused at a turn (a counter that counts what it
refuses, as HAProxy's, turns a little later), a doubling search from it, never past the next
turn. Without an opening, a host paced evenly is paced evenly from a run's first request,
and a sliding window counter of the clock then went at 0.67 of the ideal rate in the
benchmark's second runs, where the first run, unpaced at its start, went at 0.99.

Workers sharing the host through a store (another pacing it now, ``HostState.workers``, or
when its limit was learned, ``LimitEstimate.shares``) send no opening: which of them would
take the host's depth is not settled.
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ._context import HostContext, replace_limit

__all__ = ["Opening"]


class Opening:
    """The opening of one run on one host (a tracker's life), and what the run's first burst
    showed of the host.

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._decided = False
        #: Requests of the opening still to send at once, and its size.
        self._left = 0
        self._size = 0
        #: (monotonic, epoch) of the opening's first request; and from when (monotonic) a
        #: request sent is one after the opening (the next turn, once it is known).
        self._at: Optional[Tuple[float, float]] = None
        self._end = math.inf
        #: Whether a refusal now is the opening's (see the module's docstring).
        self._open = False
        #: Whether the run's first episode began (and then, whether unpaced), and what that
        #: first burst let through, until the host's shape says what it was.
        self._first: Optional[bool] = None
        self._burst: Optional[Tuple[int, float]] = None
        #: The boundary of the clock the first request after the opening waits for, while
        #: its answer is to say whether the host's window turns there (monotonic).
        self._clock: Optional[float] = None

    # -- the opening -----------------------------------------------------------------------

    def take(self, mono: float, wall: float, gap: float, even: bool) -> Optional[float]:
        """Whether the request reserved at ``mono`` (``wall``) goes in the run's opening:
        ``None`` if not, else when (monotonic) the host's even pace of one request per
        ``gap`` goes on after it (``even``: the host is paced evenly, and no refusal is
        under way; decided at the run's first reservation)."""
        if not self._decided:
            self._decided = True
            self._left = self._size = self._planned(wall) if even else 0
            self._at = (mono, wall)
        if self._left <= 0:
            return None
        self._left -= 1
        self._open = True
        if self._left:
            return mono
        clock, later = self._turns()
        first = min(later, default=mono)
        if clock is not None and clock < first:
            first = self._clock = clock  # its answer says whether the windows follow the clock
        # The requests after the opening go from there. (Counted from this request's
        # reservation, its own answer, sent a moment later, closed the opening in real
        # time: the refusal at the turn was then taken for the pace's, and searched from.)
        self._end = max(mono + gap, first)
        return self._end

    def _planned(self, wall: float) -> int:
        """The opening's size at ``wall``: the stored one, for a worker alone on the host
        (no other pacing it now, and none when its limit was learned)."""
        ctx = self.ctx
        limit = ctx.state.limit
        if limit is None or not limit.even or not limit.opening or limit.opening < 2:
            return 0
        others = [w for w in ctx.state.active_worker_ids(wall) if w != ctx.worker]
        if ctx.share > 1 or others or limit.shares > 1:
            return 0  # workers sharing the host: see the module's docstring
        return limit.opening

    def turns(self) -> List[float]:
        """When (monotonic, in order) the host's window, shut by the opening, may turn (see
        the module's docstring); empty without an opening."""
        clock, later = self._turns()
        return sorted(later if clock is None else [*later, clock])

    def _turns(self) -> Tuple[Optional[float], List[float]]:
        """``(the boundary of the clock, the turns counted from the opening)`` (see
        :meth:`turns`); the boundary ``None`` where the host's windows were shown not to
        follow the clock (``LimitEstimate.opening_clock``)."""
        limit = self.ctx.state.limit
        if self._at is None or not self._size or limit is None or limit.rate <= 0:
            return None, []
        t = self.ctx.tuning
        mono, wall = self._at
        window = self._size / limit.rate
        length = min(t.round_periods, key=lambda r: abs(math.log(r / window)))
        # (A margin after each: a window the opening's first request opened began when it
        # arrived.)
        after = mono + t.located_margin
        clock = after + math.ceil(wall / length) * length - wall
        return (None if limit.opening_clock is False else clock), [after + window, after + length]

    # -- what the host did -----------------------------------------------------------------

    def refused(self, mono: float, wall: float, limit_known: bool) -> bool:
        """A rejection episode began at ``mono`` (``wall``; ``limit_known``: a limit paced the
        host): whether the refusal was the opening's. The rest of the opening, if any, is
        not sent at once; refused at the boundary of the clock it waited for, the host's
        windows do not follow the clock."""
        if self._first is None:
            self._first = not limit_known
        if self._left:
            self._end = mono  # the opening is cut short: what is sent from now is after it
        self._left = 0
        if self._clock is not None and mono >= self._clock:
            self._followed(False, wall)
        return self._open

    def served(self, sent: float, wall: float) -> None:
        """A request sent at ``sent`` (monotonic) got through outside an episode (answered at
        ``wall``): one sent after the opening shows the host's window turned, and where it
        waited for a boundary of the clock, that the host's windows follow the clock."""
        if self._clock is not None and sent >= self._clock - self.ctx.tuning.located_margin:
            self._followed(True, wall)
        if self._open and not self._left and sent >= self._end:
            self._open = False

    def _followed(self, clock: bool, wall: float) -> None:
        """Keep whether the host's window turned at the boundary of the clock the first
        request after the opening waited for (``LimitEstimate.opening_clock``)."""
        self._clock = None
        limit = self.ctx.state.limit
        if limit is None or limit.opening_clock is clock:
            return
        self.ctx.state = self.ctx.state.replace(
            limit=replace_limit(limit, opening_clock=clock), updated_at=wall
        )
        self.ctx.dirty = True

    def ended(self, served: int, span: float, counter: bool, wall: float) -> None:
        """A rejection episode ended, with ``served`` let through over ``span`` seconds
        before it (``counter``: the host is now known to be a sliding window counter, see
        ``Prober.counter``). The run's first, begun unpaced, let through what the host
        allows when idle; once the host shows itself a counter, that is kept as its opening
        (with the learned limit) if it went at once: in less than half the time the host's
        rate would take to serve it."""
        self._open = False
        first, self._first = self._first, False
        if first and served > 1:
            self._burst = (served, span)
        limit = self.ctx.state.limit
        if self._burst is None or limit is None or not limit.even:
            return
        (burst, took), self._burst = self._burst, None
        opening = burst if counter and 2.0 * took * limit.rate < burst else None
        if limit.opening == opening:
            return
        self.ctx.state = self.ctx.state.replace(
            limit=replace_limit(limit, opening=opening, opening_clock=None), updated_at=wall
        )
        self.ctx.dirty = True
