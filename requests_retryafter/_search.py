"""The shared search: one rate for the workers that pace an evenly paced host together.

Workers sharing a store (SQLite, Redis) send to a token bucket such as nginx's ``limit_req``
in turn, on one schedule (:meth:`~requests_retryafter.state.HostState.with_send_taken`). This
module decides the schedule's rate. It is one search, kept in the store as a
:class:`~requests_retryafter.state.Search` and changed only inside the store's atomic updates,
so that the workers search together as one client alone would:

- a search starts from the limit learned (:func:`seeded`): one an earlier search left holds;
  one a worker learned among others (what it got through times the workers) is a guess,
  probed from that worker's take, which held;
- a probe (a rate above the one that held) that goes a hold without a refusal becomes the
  rate that holds;
- while the rate is only a lower bound, probes double it until one is refused; then they
  bisect between the rate that holds and the smallest refused
  (``Tuning.search_gap``); after that, a probe goes one ``probe_step`` up now and then (no
  further than halfway to the smallest refused rate while that is over half a step above),
  less often after each refused one;
- a search on a host that states its budget paces the workers at ``utilization`` of it at
  most (:func:`from_stated`, :func:`within`);
- a refusal of a request scheduled at the current rate ends a probe (the rate that held
  stands) or, outside one, decreases the rate: by one ``probe_step`` when it held for
  ``spread_probe_hold`` (a refusal at random near the host's rate), else by
  ``spread_decrease``; a rate it cuts counts from the end of the host's wait that the
  refusal brings (:func:`on_refusal`). A refusal of a request whose slot came before the
  current rate's first is ignored: that change already answered it. So one refusal event
  (several workers refused at once, slots taken at a rate too fast) is one decrease, not
  one per worker.

A rate reaches the host only after the slots the workers took before it changed (each holds
one ahead, spaced at the old rate), and after the host's wait when a refusal cut it: its
first slot is the old gap after the last of them moved to the new gap, or the wait's end,
and the rate counts from there (``Search.since``), for a probe's hold as for the refusals
it answers. A new search's rate counts from the schedule's second
slot: the first follows requests the workers sent off the schedule (started from a learned
limit, it is a gap off them; a search started from a budget the host states counts from a
window after it started: see :func:`from_stated`). So a send is taken no further ahead than
the floor or a gap (:func:`early`): the slots held ahead span a second or so, not the whole
queue of workers.

Every function here is pure: it takes a search (or a host's stored state) and the time and
returns the next. :func:`take_send` and :func:`on_refusal` are what the adapter applies in
its atomic store updates.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

from ._context import ENGINE_LOG, replace_limit
from .state import (
    MAX_COUNT,
    MAX_LIMIT_HISTORY,
    MIN_SEARCH_RATE,
    WORKER_TTL,
    HostState,
    LimitEstimate,
    Search,
)
from .tuning import Tuning

__all__ = [
    "advanced",
    "early",
    "from_stated",
    "on_refusal",
    "refused",
    "searching",
    "seeded",
    "take_send",
    "within",
]

#: A wait that ended on the dot may read a hair short of it on the clock that ends it (and a
#: wait of a hair changes no clock's reading of epoch seconds): moments this close to a
#: wait's end count as at it.
_SLACK = 1e-3


def early(
    state: HostState,
    local: Optional[LimitEstimate],
    wall: float,
    *,
    min_sleep: float,
    max_sleep: float,
    share: int,
) -> float:
    """Seconds before a worker may take a send on the host's shared schedule at ``wall``
    (0: now). A send is taken at most ``min_sleep`` (the 1 s floor), or a gap at the
    search's rate if that is longer, before it goes: a worker whose next free send is
    further off waits until it is that near, and takes it then. Taken further ahead, the
    slots of workers queued behind each other keep the rate they were taken at, and a
    faster rate reaches the host only after all of them: four workers at a request a
    second started each doubling of their search about four seconds late. Why the floor:
    a new rate then reaches the host within a second, as soon as the shortest wait after a
    refusal ends; at the rates where the queued slots span less than that (four workers at
    5 requests a second or more), no worker waits to take one, and the schedule goes as it
    did. ``local``, ``max_sleep`` and ``share`` as for :func:`take_send`."""
    search = state.search
    if search is None:
        return 0.0
    gaps = _Gaps.of(state.limit or local, share, False, max_sleep)
    gap = gaps.gap(search.rate)
    near = max(gap, min_sleep)
    ahead = state.next_send - wall
    if ahead <= near + _SLACK or ahead > gaps.ahead(gap):
        return 0.0  # near enough, or a schedule not believed (take_send starts it again)
    return ahead - near


def take_send(
    state: HostState,
    local: Optional[LimitEstimate],
    wall: float,
    *,
    depth: float,
    min_sleep: float,
    max_sleep: float,
    share: int,
    tuning: Tuning,
    alone: bool = False,
    stated: Optional[LimitEstimate] = None,
    utilization: float,
) -> Tuple[HostState, float]:
    """Take a send on the host's shared schedule at ``wall``: ``(state with the schedule and
    the search moved on, the epoch time of the send)``.

    ``state`` is the store's entry; ``local`` the limit this worker knows (if the store has
    none yet). The search starts from the learned limit, moves on (:func:`advanced`), counts
    this send, and its rate gives the gap (at most ``max_sleep``). ``depth``: see
    :func:`advanced`; ``share``: the workers taking turns. ``alone``: ``state`` is this
    worker's own copy (the store failed), so it keeps to its share of the rate: ``share``
    gaps apart. ``stated``: the budget the host states, which a search not yet stored
    starts from rather than a learned limit, at ``utilization`` of its rate (see
    :func:`from_stated`), and which bounds any search (:func:`within`).

    A search that starts here counts its rate from the schedule's second slot: the first
    follows requests sent off the schedule (the worker's own recovery, a moment before).
    Taken for the rate's answer, a refusal of it cut a rate just learned by a quarter.
    Started from a learned limit, the first slot is also a gap off: at no gap, a bucket
    without a burst refused it, and every worker waited the floor."""
    limit = state.limit or local
    search = state.search
    stated = stated if stated is not None and stated.window else None  # (a budget per window)
    if search is None:
        if stated is not None:
            search, limit = from_stated(stated, wall, utilization), stated
        else:
            seed = next((x for x in (state.limit, local) if x is not None and x.window), None)
            if seed is None:
                return state.with_send_taken(0.0, 1.0, wall)  # nothing to pace by yet
            search, limit = seeded(seed, wall), seed
    gaps = _Gaps.of(limit, share, alone, max_sleep)
    if state.search is None:
        # The schedule's first slot follows requests sent off it: the rate counts from its
        # second (a refusal of the first answers those requests, not the rate). Started from
        # a limit a worker learned, the first slot is a gap off: the recovery it was learned
        # from went a moment before, and a bucket without a burst refuses a request that
        # follows another closer than its rate allows (a wait for every worker).
        gap = gaps.gap(search.rate)
        first = state.next_slot(gaps.ahead(gap), wall)
        if stated is None:
            first = max(first, wall + gap)
            state = state.replace(next_send=first)
        search = dataclasses.replace(search, since=max(search.since, first + gap))
    elif not alone and wall - state.last_send > WORKER_TTL and state.next_send < wall:
        # No send went on the schedule for as long as a worker stays counted, yet workers
        # take it: one of them may be pacing the host on its own, its sends off the
        # schedule, until it counts the others (at its next send, see Hosts.sync). Workers
        # of a job start together, and the first to start, alone at its first read, sent a
        # moment before the next took the idle schedule's first slot: that slot is a gap
        # off, as a new schedule's. (Also for a schedule in use that a heartbeat outdated,
        # each worker's first send after a wait of the workers went a gap late: four
        # processes on nginx got 2 to 5 % less.)
        state = state.replace(next_send=wall + gaps.gap(search.rate))
    before = search
    if stated is not None:
        search = within(search, stated, utilization, wall)
    search = advanced(search, wall, depth, max(min_sleep, gaps.window), tuning)
    if _changed(before, search):
        state, search = _rebased(state, before.rate, search, wall, gaps)
    sends = min(search.sends + 1, int(MAX_COUNT))  # the count a store keeps
    state = _with_search(state, limit, dataclasses.replace(search, sends=sends), wall)
    gap = gaps.gap(search.rate)
    return state.with_send_taken(gap, gaps.ahead(gap), wall)


def on_refusal(
    state: HostState,
    local: Optional[LimitEstimate],
    slot_at: float,
    wall: float,
    tuning: Tuning,
    *,
    first: bool = True,
    resume: Optional[float] = None,
    max_sleep: float,
    share: int,
    alone: bool = False,
) -> HostState:
    """``state`` (the store's entry) after a refusal at ``wall`` of a request whose slot on
    the schedule was at ``slot_at`` (see :func:`refused`). A changed rate spaces the
    schedule's next free slot from the last one taken, as :func:`take_send` does; ``share``,
    ``alone`` and ``max_sleep`` as there.

    ``resume``: when the workers send again (the end of the host's wait that the refusal
    brings; ``wall`` if not given). A rate the refusal cut reaches the host no sooner, and
    counts from then (``Search.since``): never tried, it must hold its window of requests
    before the next probe. Counted from the refusal, the wait passed for that window, and
    the search probed on from a rate never tried (four workers on a bucket went 17.8
    requests a second, untried, to 35.6). A refused probe goes back to the rate that held,
    which needs no new trial: the next probe may follow the wait (the bucket refilled
    meanwhile), as a worker alone's does."""
    if state.search is None:
        return state
    before = state.search
    search = refused(before, slot_at, wall, tuning, first=first)
    cut = search.held < before.held
    if cut and resume is not None and resume > search.since:
        search = dataclasses.replace(search, since=resume)
    if _changed(before, search):
        gaps = _Gaps.of(state.limit or local, share, alone, max_sleep)
        state, search = _rebased(state, before.rate, search, wall, gaps)
    return _with_search(state, state.limit or local, search, wall)


@dataclasses.dataclass(frozen=True)
class _Gaps:
    """The spacing of the host's shared schedule: ``turns`` gaps of the shared rate between
    consecutive slots (one; ``share`` for a worker alone on its own copy of the schedule),
    none longer than ``max_sleep``; and how far ahead a schedule is believed."""

    window: float
    turns: int
    share: int
    max_sleep: float

    @classmethod
    def of(cls, limit: Optional[LimitEstimate], share: int, alone: bool, max_sleep: float) -> _Gaps:
        """The spacing for ``share`` workers on a host whose limit is ``limit`` (its window:
        a second without one); ``alone``: a worker on its own copy of the schedule."""
        window = limit.window if limit is not None and limit.window else 1.0
        return cls(window, share if alone else 1, share, max_sleep)

    def gap(self, rate: float) -> float:
        """Seconds between consecutive slots at ``rate``. No gap longer than one sleep may
        last: a rate cut again and again stops at one request each max_sleep (a longer wait
        for a turn holds the host instead, see CallState)."""
        return min(self.turns / rate, self.max_sleep)

    def ahead(self, gap: float) -> float:
        """Each worker holds a slot ahead at most, and may give one up (a wait came
        between): a schedule further ahead than four rounds of the workers' turns (or four
        windows) is not believed (a clock stepped back)."""
        return 4.0 * max(self.window, self.share * gap)


def _changed(before: Search, after: Search) -> bool:
    """Whether the search set a new rate (or a new rate that holds)."""
    return (after.rate, after.held, after.since) != (before.rate, before.held, before.since)


def _rebased(
    state: HostState, old_rate: float, search: Search, wall: float, gaps: _Gaps
) -> Tuple[HostState, Search]:
    """The schedule and the search once the rate changed from ``old_rate`` at ``wall``.

    The slots the workers took before are theirs, spaced at the old rate: the next free one
    is the old gap after the last of them, and moves to the new gap after it. And the new
    rate reaches the host only at that slot: the search's ``since`` (from which a probe's
    hold counts, and before which a refused request answered an earlier rate) is that
    slot's time, not the moment of the change. Counted from the change, a probe was kept
    before any request at its rate had gone: four workers each held a slot ahead at the old
    rate."""
    slot, old_gap = state.next_send, gaps.gap(old_rate)
    if slot <= wall or slot - wall > gaps.ahead(old_gap):
        return state, search  # nothing taken ahead (or a schedule not believed)
    first = max(wall, slot - old_gap + gaps.gap(search.rate))
    # (A ``since`` a window ahead, a search started from a stated budget, stays.)
    return state.replace(next_send=first), dataclasses.replace(
        search, since=max(first, search.since)
    )


def seeded(limit: LimitEstimate, wall: float) -> Search:
    """A search starting at ``wall`` from ``limit``'s rate.

    A limit an earlier search left (``by`` empty, as a limit stored by a previous run) is the
    host's: it holds, and is probed now and then. A limit one worker learned (``by`` names
    it) is a lower bound: doubled once it held, until a probe is refused. Learned among
    ``limit.shares`` workers, it is what that worker got through times them: a guess. What
    held is that worker's own take, and the guess is the first probe from there. A worker
    that got a bucket's whole burst through before the others sent guessed more than twice
    the host's rate (four workers on nginx's 10 a second with ``burst=5`` learned 24): the
    guess's refusal takes the search back to the take that held, with the guess as its
    ceiling, and the search bisects from there. Taken as the rate that held, it was cut a
    quarter at a time, and each doubling from a rate never tried was refused: the workers
    were refused every second or two."""
    if not limit.by:
        return Search(rate=limit.rate, held=limit.rate, since=wall, lower=False)
    held = max(limit.rate / limit.shares, MIN_SEARCH_RATE)
    return Search(rate=max(limit.rate, held), held=held, since=wall, lower=True)


def from_stated(stated: LimitEstimate, wall: float, utilization: float) -> Search:
    """A search starting at ``wall`` from a budget the host states (over the window its
    answers show): the workers together pace it at ``utilization`` of its rate, as one
    client alone paces a stated rate, and never try more (``Search.most``; see
    :func:`within`). The rate counts from a window after ``wall`` (``since``): until then
    the host still counts what the workers sent on their own before the schedule, and a
    refusal answers that, not the rate (a fixed window opened by the workers' first
    requests refused the schedule's first slots)."""
    held = max(stated.rate * utilization, MIN_SEARCH_RATE)
    since = wall + (stated.window or 0.0)
    return Search(rate=held, held=held, ceiling=stated.rate, since=since, most=held)


def within(search: Search, stated: LimitEstimate, utilization: float, wall: float) -> Search:
    """``search`` at ``wall`` bounded by a budget the host states now: it tries no more than
    ``utilization`` of the stated rate (``most``), and the stated rate is its ceiling, as a
    rate refused is. The host counts every client's requests against that budget: on real
    limiters, probes to 1.00 and 1.05 of it were refused now and then, each refusal
    stopping every worker for the floor. A refusal below it (requests the statements
    counted and no worker sent: another client's) cuts the rate (see :func:`refused`), and
    the search climbs back up towards the ceiling. A search past ``most`` (the statement
    changed, or an earlier version stored it) comes down to it; its ``since`` does not move
    back (it orders two copies of the search in a merge, and may still be a window ahead)."""
    most = max(stated.rate * utilization, MIN_SEARCH_RATE)
    ceiling = min(search.ceiling, stated.rate) if search.ceiling > 0 else stated.rate
    if search.rate <= most:
        if (search.most, search.ceiling) == (most, ceiling):
            return search
        return dataclasses.replace(search, most=most, ceiling=ceiling)
    held = min(search.held, most)
    rate = max(min(search.rate, most), held)
    since = max(wall, search.since)
    return dataclasses.replace(
        search, rate=rate, held=held, ceiling=ceiling, since=since, sends=0, most=most
    )


def searching(search: Search, tuning: Tuning) -> bool:
    """Whether the rate is still being searched for: a lower bound with nothing refused yet,
    or a refused rate more than ``search_gap`` times the rate that holds."""
    if search.ceiling <= 0:
        return search.lower
    return search.ceiling > tuning.search_gap * search.held


def advanced(search: Search, wall: float, depth: float, least: float, tuning: Tuning) -> Search:
    """``search`` at a send at ``wall``: a probe that held for its hold becomes the rate
    that holds; a rate that held long enough since it was set is probed one step up, never
    past ``search.most`` (when set).

    ``depth`` is how deep the host's bucket can be (a bucket absorbs an excess rate until it
    is empty; see ``Pacer.depth``); ``least`` the shortest hold of a probe while searching
    (the learned window: a probe far past the host's rate is refused within it)."""
    most = search.most or math.inf
    if search.probing:
        hold = _hold(search, depth, least, tuning)
        if wall - search.since < hold or search.sends < search.rate * hold:
            return search  # not yet a hold's time, or not yet a hold's worth of requests
        ceiling, lower = search.ceiling, search.lower
        if ceiling and search.rate >= ceiling:
            # The host allows now what it refused before: the search starts over from here.
            ceiling, lower = 0.0, False
        held = Search(search.rate, search.rate, ceiling, wall, lower, most=search.most)
        if not searching(held, tuning):
            return held
        # Searching, the next probe follows at once (as TCP's slow start doubles its window
        # each round trip that went through).
        return dataclasses.replace(held, rate=max(min(_next_rate(held, tuning), most), held.held))
    if wall - search.since < _spacing(search, least, tuning):
        return search
    rate = min(_next_rate(search, tuning), most)
    if rate <= search.held:
        return search  # at the most it may try: nothing to probe
    return dataclasses.replace(search, rate=rate, since=wall, sends=0)


def refused(
    search: Search, slot_at: float, wall: float, tuning: Tuning, *, first: bool = True
) -> Search:
    """``search`` after a refusal at ``wall`` of a request whose slot on the schedule was at
    ``slot_at`` (epoch s). ``first``: the refusal ended a run of successes; a retry refused
    again ends a probe, but decreases nothing (a long refusal, a maintenance, would otherwise
    decrease the rate at every retry)."""
    # (A worker woken a hair before the end of a wait, from which the rate counts, takes its
    # slot as the rate starts.)
    if slot_at < search.since - _SLACK:
        return search  # scheduled at an earlier rate: its change already answered this
    if search.probing:
        ceiling = min(search.ceiling or search.rate, search.rate)
        misses = search.misses + (0 if searching(search, tuning) else 1)
        return Search(
            search.held, search.held, ceiling, wall, search.lower, misses, most=search.most
        )
    if not first:
        return search
    # Outside a probe, the rate that held did not: decrease it. Refused after it held for a
    # probe's hold (``spread_probe_hold``), the refusal came at random near the host's rate
    # (a request late by a few milliseconds, then one on time): one ``probe_step`` down, as
    # a worker alone's window loses one request. Refused sooner, the rate is too fast (the
    # host's limit fell, another client came): down by ``spread_decrease``. A ceiling
    # stands (only a refused probe sets one): the search climbs back towards it as it came.
    at_random = wall - search.since >= tuning.spread_probe_hold
    cut = 1.0 / (1.0 + tuning.probe_step) if at_random else tuning.spread_decrease
    held = max(search.held * cut, MIN_SEARCH_RATE)
    return dataclasses.replace(search, rate=held, held=held, since=wall, sends=0)


def _next_rate(search: Search, tuning: Tuning) -> float:
    """The next probe: double a lower bound; bisect (geometrically) while searching; after
    the search, one ``probe_step`` up, but no further than halfway (geometrically) to the
    smallest refused rate while that is more than half a step above: a step up to it was
    refused before, and the rates between were never tried (four workers on nginx held
    9.47 requests a second under a refused 9.95, and probed 9.94 every time). Within half
    a step, the middle would be less than a quarter step up, finer than a busy machine's
    timing: a step up then asks whether the host allows the refused rate now."""
    if searching(search, tuning):
        if search.ceiling <= 0:
            return 2.0 * search.held
        return math.sqrt(search.held * search.ceiling)
    step = search.held * (1.0 + tuning.probe_step)
    if search.ceiling > search.held * (1.0 + tuning.probe_step / 2):
        return min(step, math.sqrt(search.held * search.ceiling))
    return step


def _spacing(search: Search, least: float, tuning: Tuning) -> float:
    """Seconds a rate must hold before the next probe: ``least`` while searching (after a
    refused probe or a decrease: the bucket refills), else ``probe_min_seconds``, doubled by
    each probe refused in a row (up to ``probe_max_periods / probe_after_periods`` times)."""
    if searching(search, tuning):
        return least
    most = tuning.probe_max_periods / tuning.probe_after_periods
    return tuning.probe_min_seconds * min(2.0**search.misses, most)


def _hold(search: Search, depth: float, least: float, tuning: Tuning) -> float:
    """Seconds a probe must go without a refusal to hold: long enough for its excess rate to
    empty a bucket ``depth`` deep (at most ``probe_hold_max``), and at least ``least`` while
    a lower bound is doubled, ``spread_probe_hold`` once a rate was refused (near the host's
    rate a refusal comes at random, as for a worker alone: see ``Tuning.spread_probe_hold``)."""
    doubling = searching(search, tuning) and search.ceiling <= 0
    floor = least if doubling else tuning.spread_probe_hold
    excess = search.rate - search.held
    if excess <= 0:
        return floor
    return max(floor, min(depth / excess, tuning.probe_hold_max))


def _with_search(
    state: HostState, limit: Optional[LimitEstimate], search: Search, wall: float
) -> HostState:
    """``state`` with ``search`` (changed at ``wall``); when the rate that holds changed, the
    limit says so too (an even one: for reports, and for a worker left alone or the next
    run, which pace from the limit)."""
    old = state.search
    state = state.replace(search=search)
    if old is not None and (old.rate, old.held) == (search.rate, search.held):
        return state
    ENGINE_LOG.debug(
        "%s: shared search now %.3g requests/s (holds %.3g, refused %.3g)",
        state.host,
        search.rate,
        search.held,
        search.ceiling,
    )
    if old is None and search.probing:
        # A new search probing a worker's guess (see seeded): the take that held is a bound
        # of the host's rate, not the rate. The limit learned stays until a rate holds (a
        # worker left alone, or the next run, paces from it).
        return state if state.limit is not None or limit is None else state.replace(limit=limit)
    if state.limit is not None and abs(state.limit.rate - search.held) <= 1e-9 * search.held:
        return state
    if limit is None:
        limit = LimitEstimate(search.held, 1.0)
    window = limit.window or 1.0
    held = replace_limit(
        limit,
        rate=search.held,
        window=window,
        burst=max(1, round(search.held * window)),
        updated_at=wall,
        by="",
        even=True,
        source="observed",
        shares=1,  # the workers' rate together, no one worker's guess
    )
    history = (*state.limit_history, (wall, round(search.held, 6)))[-MAX_LIMIT_HISTORY:]
    updated = max(state.updated_at, wall)
    return state.replace(limit=held, limit_history=history, updated_at=updated)
