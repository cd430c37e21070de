"""The log of a pacer's recent requests (see :class:`~requests_retryafter._pacer.Pacer`), and
which periods it holds."""

from __future__ import annotations

from collections import deque
from typing import Callable, Deque, Optional, Tuple

from ._context import HostContext

__all__ = ["PaceLog", "SendLog"]


class SendLog:
    """When the last requests of a window's budget went, as a sliding window keeps them.

    A host's windows may be sliding ones (a log of the last window's requests, as the
    ``limits`` library's moving window and Django REST framework's throttles keep), located
    on the clock by an obeyed header or not: such a host lets a request through only when
    fewer than its budget reached it within the window before. So, of a
    budget of ``allowed`` per ``period``, the next request goes no sooner than a window
    after the ``allowed``-th latest, plus a margin (two requests' latencies differ, and a
    sleep overshoots by a varying hair). A fixed window is as happy with that (a window's
    span never holds more than the budget); it costs the margin once a window.

    The place a request frees goes to whichever request comes next: it is not the same
    request's of every period (so kept, a retry a floor late after a refusal at random left
    a gap that the request in its place waited at in every later period, a second a window,
    on a host whose budget was a client's own pace).
    """

    def __init__(self) -> None:
        self._times: Deque[float] = deque()
        self._last: Optional[float] = None

    def clear(self) -> None:
        """Forget every request (the host's windows start afresh)."""
        self._times.clear()
        self._last = None

    def take(self, start: float, mono: float, allowed: int, period: float, margin: float) -> float:
        """When a request of a budget of ``allowed`` per ``period`` that the lattice lets go
        at ``start`` may go (at ``mono`` or later), noted as gone then."""
        times = self._times
        while len(times) > allowed:
            # A smaller budget (a cut): its places are those the last period's first
            # requests used (the rest went over it, as if they had not gone).
            times.pop()
        if len(times) == allowed:
            start = max(start, times.popleft() + period + margin)
        went = max(start, mono)
        times.append(went)
        self._last = went
        return start

    def add(self, went: float, allowed: int) -> None:
        """Note a request that went at ``went`` outside the budget's places (the try of a
        run's first window, see ``Pacer.served``): the latest of a budget of ``allowed``."""
        if len(self._times) >= allowed:
            self._times.popleft()
        self._times.append(went)

    def release(self) -> None:
        """Forget the request last taken (its call stopped before it went): the latest
        entry of its time (another call may have taken a place since)."""
        times = self._times
        for index in range(len(times) - 1, -1, -1):
            if times[index] == self._last:
                del times[index]
                break
        self._last = None


class PaceLog:
    """The pacer's log of its requests (a :class:`SendLog`) and the periods it holds.

    On windows not located on the clock it holds every period. On windows located on the
    clock it holds those :func:`_logs` says, and where it holds a period's first request
    past the lattice's start, the lattice moves with it (:attr:`moved`, see
    :meth:`take`).

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        #: When the last requests went (see :class:`SendLog`).
        self.sends = SendLog()
        #: Whether the log moved the pacer's lattice from the located one (see :meth:`take`
        #: and :func:`_in_step_moved`).
        self.moved = False
        #: Whether the requests of the current period go in the log (see :func:`_logs`).
        self.logging = True
        self._first_ends = float("-inf")  # when the run's first period ends (see _logs)

    def started(self, first_ends: float) -> None:
        """The pacer's lattice starts afresh, its first period ending at ``first_ends``."""
        self.moved = False
        self.sends.clear()
        self._first_ends = first_ends

    def begin(self, first: float, start: float) -> None:
        """A period that starts at ``start`` begins, its first request going at ``first``:
        whether the log holds its requests (:func:`_logs`)."""
        self.logging = _logs(self.ctx, first, start, self._first_ends)

    def take(
        self,
        place: int,
        start: float,
        mono: float,
        allowed: int,
        period: float,
        learned: Optional[Tuple[int, float]],
    ) -> Tuple[float, bool]:
        """``(when, moved)``: when the request at ``place`` of its period's budget of
        ``allowed`` per ``period`` that the lattice lets go at ``start`` may go (at ``mono``
        or later), the log holding ``learned``'s places of a probe's budget (see
        :func:`_held`); and whether the period's start, and the lattice with it, moves to
        then: the log put the period's first request later than the lattice's start, on
        windows located on the clock (see :func:`_in_step_moved`). Only while
        :attr:`logging`."""
        ctx = self.ctx
        held = _held(ctx, learned, allowed, period)
        if place >= held:
            # A probe's place past the learned budget: the one the log does not hold.
            self.sends.add(max(start, mono), allowed)
            return start, False
        lattice, start = start, self.sends.take(start, mono, held, period, ctx.tuning.reuse_margin)
        moved = place == 0 and start > lattice and not _unlocated(ctx)
        self.moved = self.moved or moved
        return start, moved

    def served(self, sent: float, budget: Callable[[], Optional[Tuple[int, float]]]) -> None:
        """A request sent at ``sent`` outside the budget's places (the try of a run's first
        window's turn, see ``Pacer.served``) is the latest the log holds, while it holds
        the period's requests (``budget``: the pacer's, asked only then)."""
        if self.logging:
            paced = budget()
            if paced is not None:
                self.sends.add(sent, paced[0])

    def recovered(
        self, mono: float, snap: float, anchor: Optional[float], budget: Optional[Tuple[int, float]]
    ) -> float:
        """A recovery at ``mono`` from a rate limit (or the first, unanchored), the pacer
        paced by ``budget``: the anchor its lattice takes (``snap``, the located lattice's
        window start, in the phase the log moved it to, see :func:`_in_step_moved`), its
        first period begun by the recovering request. On windows located on the clock the
        recovery is the first the log holds (else the next period's first found none to
        wait for, and went early for a sliding window the recovery began), unless it came
        late (:func:`_logs`)."""
        anchor, self.moved = _in_step_moved(self.ctx, mono, snap, anchor, self.moved)
        self._first_ends = float("-inf")
        self.logging = _logs(self.ctx, mono, anchor, self._first_ends)  # (its first)
        # The host let a request through again: its windows start from here, whatever
        # went before.
        self.sends.clear()
        if budget is not None and self.logging and not _unlocated(self.ctx):
            self.sends.add(mono, budget[0])
        return anchor


def _logs(ctx: HostContext, first: float, start: float, first_ends: float) -> bool:
    """Whether the pacer's log (see :class:`SendLog`) holds the requests of a period
    that starts at ``start`` and whose first request goes (or went) at ``first``, the run's
    first period ending at ``first_ends``.

    Windows not located on the clock may be sliding ones: the log holds every period.
    Windows located on the clock may be fixed ones, or windows whose start an obeyed
    header located that follow the client's own requests: a sliding log with a
    truthful ``Retry-After`` (Django REST framework's throttles) recovers exactly a
    window after its oldest request, and a window opened at a request where the last
    one expired; the bursts from there make a lattice too. The log holds them as well
    (a burst whose requests were answered faster than the one before reached such a
    log sooner after its start and was refused partway, each refusal costing the
    header's whole second), but not a run's first period, nor one whose first request
    went ``Tuning.reuse_late`` or more after its start (an obeyed header ends within
    its last second): one begun by a recovery found by own backoff, or at the end of a
    hold or a maintenance. Such a period says nothing of where a sliding window frees
    its places, and on a fixed window (whose last part a run's first period may be)
    its requests would hold the next window's budget, which the window lets through at
    its start (a recovery 29 s into a minute's window held it 29 s; a run begun a
    second into a window, a second each run)."""
    if _unlocated(ctx):
        return True
    return start >= first_ends and first - start < ctx.tuning.reuse_late


def _held(
    ctx: HostContext, learned: Optional[Tuple[int, float]], allowed: int, period: float
) -> int:
    """How many of a period's ``allowed`` places the pacer's log holds: all of them, but
    on windows located on the clock while a probe of a larger budget of the same window is
    under way, the ``learned`` budget's (``None``: no probe under way). The log holds as
    many requests as the budget it paced, so a probe's first place found none to wait for,
    went at the lattice's start (early by the margins the log had added each window since
    the last recovery) and was refused there, on a sliding window as on one opened at a
    request: the probe tests one request more a window, after the learned budget's, not a
    window sooner. (On windows not located on the clock, holding them so cost a sliding
    window with no header more refusals after its probes: left as it was.)"""
    if learned is None or _unlocated(ctx) or learned[1] != period or learned[0] >= allowed:
        return allowed
    return learned[0]


def _in_step_moved(
    ctx: HostContext, mono: float, snap: float, anchor: Optional[float], moved: bool
) -> Tuple[float, bool]:
    """The anchor a recovery at ``mono`` sets, and whether the lattice stays moved: the
    start of the learned lattice's window (``snap``, see ``_pacer._in_step``), in the phase of the
    pacer's ``anchor`` where its log ``moved`` the lattice (no later than the recovery
    itself). Where each period's first request opens the host's window (a sliding log, a
    window opened at a request), the windows moved with the log, and the recovery came at
    the end of one of them: snapped back to the lattice as the header located it, the next
    burst went early into the window the recovery had opened. On a fixed window the
    recovery comes at its window's start or a rounding later, and the lattice is back in
    step with it."""
    limit = ctx.state.limit
    if not moved or anchor is None or limit is None or not limit.window:
        return snap, False
    anchor = min(snap + (anchor - snap) % limit.window, mono)
    return anchor, anchor != snap


def _unlocated(ctx: HostContext) -> bool:
    """Whether the host's windows were not located on the clock: no lattice of the clock
    keeps them in step, and the pacer's log of its requests (see :class:`SendLog`) holds
    every period (on windows located on the clock, see :func:`_logs`)."""
    limit = ctx.state.limit
    return limit is None or limit.anchor is None
