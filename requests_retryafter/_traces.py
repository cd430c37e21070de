"""What the adapter did: per call (:class:`RetryTrace`, on every response) and per host
(:class:`HostSummary`, counted by :class:`Summaries`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import requests

from .calls import CallState
from .decisions import Decision, Event

__all__ = ["TRACE_ATTRIBUTE", "HostSummary", "RetryTrace", "Summaries", "trace", "trace_of"]

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


class _Tally:
    """A host's :class:`HostSummary` as it is counted (one frozen copy per call was a
    measurable part of the adapter's cost per request)."""

    __slots__ = ("calls", "give_ups", "holds", "refusals", "requests", "waited", "waits")

    def __init__(self) -> None:
        self.calls = self.requests = self.refusals = self.waits = 0
        self.holds = self.give_ups = 0
        self.waited = 0.0

    def summary(self, host: str) -> HostSummary:
        # The slots are HostSummary's counted fields, by name.
        return HostSummary(host, **{name: getattr(self, name) for name in self.__slots__})


class Summaries:
    """An adapter's finished calls, counted per host (thread-safe)."""

    def __init__(self) -> None:
        self._tallies: Dict[str, _Tally] = {}
        self._lock = threading.Lock()

    def count(self, call: CallState) -> None:
        """Add a finished call to its host's summary."""
        with self._lock:
            tally = self._tallies.get(call.host)
            if tally is None:
                tally = self._tallies[call.host] = _Tally()
            tally.calls += 1
            tally.requests += call.attempts
            if not (call.decisions or call.refusals or call.waits):
                return  # (most calls: no refusal, no wait, nothing decided)
            tally.refusals += call.refusals
            tally.waits += call.waits
            tally.waited += call.waited
            tally.holds += any(d.event == Event.HOLD for d in call.decisions)
            tally.give_ups += any(d.event == Event.GIVE_UP for d in call.decisions)

    def summary(self) -> Dict[str, HostSummary]:
        """Every host's summary so far (a copy)."""
        with self._lock:
            return {host: tally.summary(host) for host, tally in self._tallies.items()}
