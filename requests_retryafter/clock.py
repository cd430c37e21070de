"""Clocks: every sleep, interval and HTTP-date the adapter handles goes through one.

The adapter never calls :mod:`time` directly. It takes a :class:`Clock` (anything with
``time()``, ``monotonic()`` and ``sleep()``), so that tests, simulations and users' own test
suites can run on virtual time with :class:`FakeClock` and never sleep for real.
"""

from __future__ import annotations

import threading
import time
from time import monotonic as _monotonic
from time import time as _wall_time
from typing import Callable, List, Optional, Protocol

__all__ = ["Clock", "FakeClock", "SystemClock", "TickingClock"]


class Clock(Protocol):
    """What the adapter needs of a clock."""

    def time(self) -> float:
        """Seconds since the epoch (wall clock): resolves HTTP-dates, stamps stored state."""

    def monotonic(self) -> float:
        """A clock that never goes backwards: measures intervals and deadlines."""

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""


class SystemClock:
    """The real clock: :func:`time.time`, :func:`time.monotonic` and :func:`time.sleep`.

    Its ``time`` and ``monotonic`` are those two functions themselves."""

    # The C functions themselves, not methods that call them: the adapter reads the clock
    # several times per request, and each Python call in between costs a fraction of a
    # microsecond on its path.
    time = staticmethod(_wall_time)
    monotonic = staticmethod(_monotonic)

    def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` (nothing for zero or less)."""
        if seconds > 0:
            time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A virtual clock for tests: ``sleep()`` moves time forward at once and returns.

    Thread-safe. ``sleeps`` records every sleep asked for, so a test can assert on the waits the
    adapter chose without waiting for them::

        clock = FakeClock()
        adapter = RetryAfterAdapter(clock=clock)
        ...
        assert clock.sleeps == [30.0]

    Args:
        start: the initial wall-clock time (epoch seconds).
        on_sleep: called with each sleep's duration after time has moved, for simulations
            that must react to the passing of virtual time.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        start: float = 1_700_000_000.0,
        *,
        on_sleep: Optional[Callable[[float], None]] = None,
    ) -> None:
        self._lock = threading.Lock()
        self._wall = float(start)
        self._mono = 0.0
        self.sleeps: List[float] = []
        self._on_sleep = on_sleep

    def time(self) -> float:
        """Return the virtual wall-clock time."""
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        """Return the virtual monotonic time (starts at 0)."""
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` without recording a sleep."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def step_wall(self, seconds: float) -> None:
        """Step the wall clock alone by ``seconds``, forwards or backwards, as an NTP
        correction or a resumed virtual machine does; monotonic time does not move.

        .. versionadded:: 0.1.0
        """
        with self._lock:
            self._wall += float(seconds)

    def sleep(self, seconds: float) -> None:
        """Record the sleep and move time forward by it (never backwards)."""
        seconds = max(0.0, float(seconds))
        with self._lock:
            self.sleeps.append(seconds)
            self._wall += seconds
            self._mono += seconds
        if self._on_sleep is not None:
            self._on_sleep(seconds)

    @property
    def slept(self) -> float:
        """Total virtual seconds slept so far."""
        with self._lock:
            return sum(self.sleeps)

    def __repr__(self) -> str:
        return f"FakeClock(time={self._wall!r}, monotonic={self._mono!r})"


class TickingClock(FakeClock):
    """A :class:`FakeClock` that also moves on a microsecond each time its monotonic time is
    read, as a real clock does between a request's reservation and its send.

    On a FakeClock a burst of requests reaches a host at one moment; on a real clock each
    reaches it at a moment of its own. A simulated host that refuses at random moments
    (:class:`~requests_retryafter.testing.Sporadic`) then refuses one request of a burst, not
    all of it or none, as a real host under load does: use this clock to test a crawl
    against such hosts. Sleeps and ``advance`` work as on a FakeClock.

    .. versionadded:: 0.2.0
    """

    #: Seconds each reading of the monotonic time moves both clocks on.
    TICK = 1e-6

    def monotonic(self) -> float:
        """Move on a tick, then return the virtual monotonic time."""
        self.advance(self.TICK)
        return super().monotonic()

    def __repr__(self) -> str:
        return f"TickingClock(time={self._wall!r}, monotonic={self._mono!r})"
