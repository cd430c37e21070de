"""How far a host's clock reads from this machine's, from the ``Date`` of its answers.

A host states its resets as epoch seconds (``X-RateLimit-Reset``) or HTTP-dates
(``Retry-After``) on its own clock. Read against this machine's clock, a host whose clock
runs 30 s ahead states every reset 30 s late (waited for after each window: a host of 5
requests a second got 0.05 of its rate), and one behind states them early (refused at
them).

Its ``Date`` says how its clock reads. A ``Date`` is truncated to a whole second and
stamped while the request was on the wire, so each answer bounds the host's offset
(its clock less this machine's): at least ``Date`` less the moment the answer came, and less
than ``Date`` less the moment the request went, plus a second. The bounds of the host's
latest answers are kept (``Tuning.date_answers``). Where they show its clock more than
``Tuning.date_ahead`` ahead, or more than ``Tuning.date_behind`` behind, the host's resets
and dates are read on its clock at the lower bound: late by their rounding and the answers'
way here, never early. A host that may be in step is read on this machine's clock, as
before (a slow answer's ``Date`` reads behind, but its request went before it was stamped:
no proof of a clock behind).
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Mapping, Optional, Tuple

from .parsing import date_offset
from .tuning import Tuning

__all__ = ["ServerClock"]


class ServerClock:
    """One host's clock, as its answers' ``Date`` show it (see the module's docstring).
    Not thread-safe: called under the host's lock."""

    __slots__ = ("_bounds", "_tuning")

    def __init__(self, tuning: Tuning) -> None:
        self._tuning = tuning
        #: ``(low, high)`` on the host's offset, one pair per answer with a ``Date``.
        self._bounds: Deque[Tuple[float, float]] = deque(maxlen=tuning.date_answers)

    def now(self, headers: Mapping[str, str], wall: float, sent: Optional[float] = None) -> float:
        """The time on the host's clock when this machine's reads ``wall`` (epoch seconds),
        taking into account the ``Date`` of ``headers``, an answer that came at ``wall`` to
        a request sent at ``sent`` (epoch seconds; ``None``: unknown): ``wall`` itself
        while the host's clock may be in step with this machine's."""
        offset = date_offset(headers, wall)
        if offset is not None:
            high = float("inf") if sent is None else offset + (wall - sent) + 1.0
            self._bounds.append((offset, high))
        if not self._bounds:
            return wall
        low = max(b[0] for b in self._bounds)
        high = min(b[1] for b in self._bounds)
        t = self._tuning
        return wall + low if low > t.date_ahead or high < -t.date_behind else wall
