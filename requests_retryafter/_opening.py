"""A run's opening on a host paced evenly: the budget a sliding window counter let through at
once when idle, sent at once again, and the turn of the window that burst shuts; and on a
fixed window, the turn of the run's first window.

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

A fixed window paced by its budget (not evenly) has an opening of its own: the run's first
window. Where the host's windows are its own (they start on its clock, or at another
client's request, not at ours) and their phase is not known (no lattice located on the
clock), that window began before the run, and turns anywhere from the run's first request
to a window after it. The first run, unpaced, found the turn by refusals; a later run sent
the budget at once and then waited a whole window from its first request, up to a window
late (a window of 50 per 45 s of the clock: second runs at 0.80 to 0.97 of the ideal rate,
where the first went at 0.87 to 1.00). So the request after the first window's budget goes
at once, and is refused unless the window turned during the burst; its retries go at each
``1 / (Tuning.partial_tries + 1)`` of a window after the run's first request, and at the
window's end: the turn is found at most that share of a window late, for at most
``partial_tries + 1`` refusals a run. Still refused at the window's end (the window learned
short), the retries search from that end, each twice as far past it as the last. Those
refusals are the opening's (nothing is learned from them), and the recovery is a window
start, as any. A refusal within the first window's budget ends the search (the window let
less through than its budget), unless it is taken for one at random (``LimitLearner``): the
budget's rest goes, and the turn is searched as before. A request after the budget that got
through at once shows the window turned during the burst: the run goes on as without a
search (the next window a window after the first request), that request held in the
pacer's log of its requests as the latest (see ``Pacer.served``). The host's windows are shown its
own by an episode stored that recovered well within a window (``Tuning.host_lattice``)
after its cycle's first request went: a window opened by our request, or a sliding window,
turns no sooner, and trying it before is refused for nothing. Only a worker alone (as
above), and only on windows whose share between tries is at least the floor
(``Policy.min_sleep``): the refused tries are that far apart at the least. One try goes at
a time: other calls waiting for a place then wait for the window's end, as without a
search, and their places count in the window the try found.
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ._context import HostContext, replace_limit

__all__ = ["Opening"]


class Opening:
    """The opening of one run on one host (a tracker's life), and what the run's first burst
    showed of the host; on a fixed window, the search of the run's first window's turn.

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
        #: A fixed window's first, partial window (see the module's docstring): when
        #: (monotonic) the run's first request went and the window's length, while its turn
        #: may be searched.
        self._partial: Optional[Tuple[float, float]] = None
        #: The try granted last: how many of the tries' moments had come when it was (one
        #: try between two, whatever the number of calls waiting for a place); -1 before
        #: the first (the search began once the budget was spent).
        self._tried = -1
        self._try_at = math.inf  # (monotonic) when the last try was reserved
        #: Refused within the first window's budget: the search waits for what the refusal
        #: was (see :meth:`ended`).
        self._refused = False
        self._last: Optional[float] = None  # (see last_try)

    # -- the opening -----------------------------------------------------------------------

    def take(
        self, mono: float, wall: float, budget: Tuple[int, float], even: bool, fixed: bool
    ) -> Optional[float]:
        """Whether the request reserved at ``mono`` (``wall``) goes in the run's opening:
        ``None`` if not, else when (monotonic) the host's even pace of one request per gap
        of ``budget`` (``(requests, window)``) goes on after it (``even``: the host is paced
        evenly, and no refusal is under way; ``fixed``: it is paced by its budget at each
        window's start, and no refusal is under way; decided at the run's first
        reservation, as is whether a fixed window's first window is searched, see
        :meth:`trying`)."""
        if not self._decided:
            self._decided = True
            self._left = self._size = self._planned(wall) if even else 0
            self._at = (mono, wall)
            if fixed and self._own(budget[1], wall):
                self._partial = (mono, budget[1])
        gap = budget[1] / budget[0]
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
        if not self._alone(wall):
            return 0  # workers sharing the host: see the module's docstring
        return limit.opening

    def _alone(self, wall: float) -> bool:
        """Whether this worker is alone on the host at ``wall``: no other pacing it now, and
        none when its limit was learned."""
        ctx = self.ctx
        limit = ctx.state.limit
        if ctx.share > 1 or (limit is not None and limit.shares > 1):
            return False
        return not [w for w in ctx.state.active_worker_ids(wall) if w != ctx.worker]

    def _own(self, window: float, wall: float) -> bool:
        """Whether a fixed window of ``window`` seconds is searched for its turn at the end
        of a run's first window (see the module's docstring): the host's windows shown its
        own, not on a lattice located on the clock, a worker alone, tries the floor apart."""
        ctx = self.ctx
        limit = ctx.state.limit
        if limit is None or limit.even or limit.anchor is not None or not self._alone(wall):
            return False
        if window / (ctx.tuning.partial_tries + 1) < ctx.policy.min_sleep:
            return False
        # Well within a window (Tuning.host_lattice): a window learned long (its recovery
        # found late) would show a sliding window's first recovery as sooner than a window.
        return any(
            o.status in (429, 503)
            and not o.at_random
            and o.served > 0
            and o.recovered is not None
            and o.span + o.recovered < ctx.tuning.host_lattice * window
            for o in ctx.state.observations
        )

    def trying(self, mono: float, first: bool, spent: bool) -> bool:
        """Whether the request reserved at ``mono`` goes now as a try of the turn of the
        run's first window (see the module's docstring): while ``first`` (the pacer's
        periods are still in that window; once they are not, the search is over), and once
        its budget is ``spent``. ``False`` when no search is on."""
        if self._partial is None:
            return False
        start, window = self._partial
        if not first:
            self._partial, self._open = None, False
            return False
        if not spent or self._refused:
            return False
        tries = self.ctx.tuning.partial_tries + 1
        # (the tries' moments come so far; a retry sent at one, a hair short of it)
        due = int((mono - start) * tries / window + 1e-6)
        if due == self._tried:
            return False  # this one's try went: the others wait for the window's end
        self._tried, self._try_at = due, mono
        self._last = start + window
        self._open = True
        self._end = math.inf
        return True

    def _searching(self) -> bool:
        """Whether the run's first window's turn is being searched: a try went, and the
        search is not over."""
        return self._partial is not None and self._tried >= 0

    def next_try(self, mono: float) -> Optional[float]:
        """When (monotonic) the next try of the run's first window's turn after ``mono``
        goes, while that window is searched; ``None`` otherwise, or after the last."""
        if self._partial is None or not self._searching():
            return None
        start, window = self._partial
        tries = self.ctx.tuning.partial_tries + 1
        ahead = [start + window * i / tries for i in range(1, tries + 1)]
        return min((at for at in ahead if at > mono), default=None)

    def last_try(self) -> Optional[float]:
        """When (monotonic) the last try of the run's first window's turn is due (the
        window's end, where the pacer's next period begins and the search ends), from the
        search's first try until the episode it began ends; ``None`` otherwise."""
        return self._last

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
        if not self._searching() and self._partial is not None:
            self._refused = True  # within the first window's budget: see ended()
        if self._clock is not None and mono >= self._clock:
            self._followed(False, wall)
        return self._open

    def served(self, sent: float, wall: float) -> bool:
        """A request sent at ``sent`` (monotonic) got through outside an episode (answered at
        ``wall``): one sent after the opening shows the host's window turned, and where it
        waited for a boundary of the clock, that the host's windows follow the clock.
        Returns whether it was the try of a fixed window's turn right after the run's
        first budget (the window turned during the burst: the search ends)."""
        burst = self._searching() and sent >= self._try_at
        if burst:
            self._partial, self._open = None, False
        if self._clock is not None and sent >= self._clock - self.ctx.tuning.located_margin:
            self._followed(True, wall)
        if self._open and not self._left and sent >= self._end:
            self._open = False
        return burst

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

    def ended(
        self, served: int, span: float, counter: bool, wall: float, at_random: bool = False
    ) -> bool:
        """A rejection episode ended, with ``served`` let through over ``span`` seconds
        before it (``counter``: the host is now known to be a sliding window counter, see
        ``Prober.counter``; ``at_random``: the refusal was taken for one at random partway
        through a window's budget, see ``LimitLearner``). The run's first, begun unpaced,
        let through what the host allows when idle; once the host shows itself a counter,
        that is kept as its opening (with the learned limit) if it went at once: in less
        than half the time the host's rate would take to serve it. Returns whether the
        recovery found the turn of a fixed window's first window in the run (see
        :meth:`trying`).

        A refusal within the first window's budget ends the search of its turn: the window
        let through less than its budget, and the recovery is a window start (as any); not
        one at random, after which the budget is spent and the turn searched as before (the
        search dropped, a window of 100 a minute refused at random at its 94th request in a
        run's first seconds waited a whole minute after the run's first request, its window
        having turned 10 s into the run: 0.58 of the ideal rate, where the run before went
        at 0.98)."""
        self._open = False
        self._last = None
        found = self._searching()
        if not (at_random and self._refused):
            self._partial = None
        self._refused = False
        first, self._first = self._first, False
        if first and served > 1:
            self._burst = (served, span)
        limit = self.ctx.state.limit
        if self._burst is None or limit is None or not limit.even:
            return found
        (burst, took), self._burst = self._burst, None
        opening = burst if counter and 2.0 * took * limit.rate < burst else None
        if limit.opening != opening:
            self.ctx.state = self.ctx.state.replace(
                limit=replace_limit(limit, opening=opening, opening_clock=None), updated_at=wall
            )
            self.ctx.dirty = True
        return found
