"""The log of a pacer's recent requests (see :class:`~requests_retryafter._pacer.Pacer`)."""

from __future__ import annotations

from collections import deque
from typing import Deque, Optional

__all__ = ["SendLog"]


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
