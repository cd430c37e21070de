"""What the adapter did: per call (:class:`RetryTrace`, on every response) and per host
(:class:`HostSummary`, counted by :class:`Summaries`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import requests

from .calls import CallState
from .decisions import Decision, Event

__all__ = [
    "TRACE_ATTRIBUTE",
    "HostSummary",
    "RetryTrace",
    "Summaries",
    "Tally",
    "trace",
    "trace_of",
]

#: The attribute of a response that carries its :class:`RetryTrace`.
TRACE_ATTRIBUTE = "retry_after"


@dataclass(frozen=True)
class RetryTrace:
    """What the adapter did for one call, as ``response.retry_after`` carries it (like
    requests-cache's ``from_cache``). Also on the ``response`` of a
    :class:`~requests_retryafter.RetryAfterError` the call raised.

    Attributes:
        host: the host key.
        attempts: requests sent for this call (1: it was not retried; 0: none went out).
        refusals: 429/503 answers among them.
        waited: seconds this call spent waiting (retries and pacing), by the adapter's clock.
        decisions: every :class:`~requests_retryafter.Decision` of this call, in order (as
            the ``on_decision`` hook got them).

    .. versionadded:: 0.1.0
    """

    host: str
    attempts: int
    refusals: int
    waited: float
    decisions: Tuple[Decision, ...]

    @property
    def retried(self) -> bool:
        """Whether more than one request was sent."""
        return self.attempts > 1


def trace_of(response: requests.Response) -> Optional[RetryTrace]:
    """The :class:`RetryTrace` of a response (``response.retry_after``, typed), or ``None``
    for a response that did not come through a :class:`RetryAfterAdapter`.

    .. versionadded:: 0.1.0
    """
    trace = getattr(response, TRACE_ATTRIBUTE, None)
    return trace if isinstance(trace, RetryTrace) else None


def trace(call: CallState, sent_once: RetryTrace) -> RetryTrace:
    """The trace of ``call``; ``sent_once``, its host's trace of a call that sent one request
    and decided nothing (most calls: their traces are all alike, and frozen)."""
    if call.attempts == 1 and not call.decisions and not call.waited:
        return sent_once
    return RetryTrace(call.host, call.attempts, call.refusals, call.waited, tuple(call.decisions))


@dataclass(frozen=True)
class HostSummary:
    """What an adapter did for one host so far (see :meth:`RetryAfterAdapter.summary`).

    Attributes:
        host: the host key.
        calls: calls to :meth:`RetryAfterAdapter.send` for this host.
        requests: requests sent (retries included).
        refusals: 429/503 answers.
        waits: waits before a request (retries and pacing).
        waited: seconds spent in those waits.
        holds: calls stopped because the host was held.
        give_ups: calls stopped because a budget ran out (attempts, deadline).

    .. versionadded:: 0.1.0
    """

    host: str
    calls: int = 0
    requests: int = 0
    refusals: int = 0
    waits: int = 0
    waited: float = 0.0
    holds: int = 0
    give_ups: int = 0


class Tally:
    """A host's :class:`HostSummary` as it is counted (one frozen copy per call was a
    measurable part of the adapter's cost per request)."""

    __slots__ = ("calls", "give_ups", "holds", "refusals", "requests", "waited", "waits")

    def __init__(self) -> None:
        self.calls = self.requests = self.refusals = self.waits = 0
        self.holds = self.give_ups = 0
        self.waited = 0.0

    def count(self, call: CallState) -> None:
        """Add a finished call (under the lock of the :class:`Summaries` it is part of)."""
        self.calls += 1
        self.requests += call.attempts
        if not (call.decisions or call.refusals or call.waits):
            return  # (most calls: no refusal, no wait, nothing decided)
        self.refusals += call.refusals
        self.waits += call.waits
        self.waited += call.waited
        self.holds += any(d.event == Event.HOLD for d in call.decisions)
        self.give_ups += any(d.event == Event.GIVE_UP for d in call.decisions)

    def summary(self, host: str) -> HostSummary:
        # The slots are HostSummary's counted fields, by name.
        return HostSummary(host, **{name: getattr(self, name) for name in self.__slots__})


class Summaries:
    """An adapter's finished calls, counted per host key: each key's :class:`Tally` outlives
    the host's runtime in memory. Tallies are counted, and read, under ``lock`` (the adapter's
    hosts' lock, which the end of every call takes anyway)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._tallies: Dict[str, Tally] = {}
        self._lock = lock

    def tally(self, host: str) -> Tally:
        """Host key ``host``'s tally (a new one at its first call)."""
        with self._lock:
            tally = self._tallies.get(host)
            if tally is None:
                tally = self._tallies[host] = Tally()
            return tally

    def summary(self) -> Dict[str, HostSummary]:
        """Every host's summary so far (a copy)."""
        with self._lock:
            return {host: tally.summary(host) for host, tally in self._tallies.items()}
