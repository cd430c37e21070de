"""What the adapter decides, as values: :class:`Decision`, its :class:`Event` and its
:class:`Code`.

Every wait, hold, refusal and give-up is one :class:`Decision`, made by the pure core (the
host's :class:`~requests_retryafter.engine.HostTracker` and the call's
:class:`~requests_retryafter.calls.CallState`) and carried out by the adapter. Programs read
``event`` and ``code``, which are stable; ``reason`` is for people and its wording may change.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional, Union

from .state import Category

__all__ = ["Code", "Decision", "Event"]


class Event(str, Enum):
    """What a :class:`Decision` is about. A ``str`` enum: ``Event.SLEEP == "sleep"``.

    .. versionadded:: 0.1.0
    """

    #: Wait as decided after a 429/503 (or a connection failure), then retry.
    SLEEP = "sleep"
    #: The host is held: calls raise :class:`~requests_retryafter.HostHeld` until it ends.
    HOLD = "hold"
    #: The answer goes back to the caller unretried (authentication, not replayable).
    REFUSE = "refuse"
    #: A budget ran out (attempts, deadline, connection retries): the call raises.
    GIVE_UP = "give_up"
    #: Waited before a request for pacing or for a wait another call's refusal set.
    WAIT = "wait"
    #: A header was ignored on a response that is not a rejection.
    IGNORE = "ignore"
    #: The host's category changed.
    CATEGORY = "category"

    def __str__(self) -> str:
        return str(self.value)


class Code(str, Enum):
    """Why a :class:`Decision` was made, as a stable word for programs. A ``str`` enum:
    ``Code.PACING == "pacing"``.

    .. versionadded:: 0.2.0
    """

    #: A 429/503's ``Retry-After`` was obeyed as sent (a ``sleep``).
    HEADER_OBEYED = "header_obeyed"
    #: The wait after a 429/503 is the adapter's own (the header is not trusted, or absent).
    OWN_BACKOFF = "own_backoff"
    #: A connection failure: retried after own backoff, or given up.
    CONNECTION = "connection"
    #: The host is held (a long trusted wait, or a used-up share of a long window).
    HOLD = "hold"
    #: A wait before a request, to stay below the host's learned limit.
    PACING = "pacing"
    #: A wait before a request that another call's rejection set.
    SHARED_WAIT = "shared_wait"
    #: An authentication answer (401, 403 or 407), never retried.
    AUTH = "auth"
    #: The request may not be sent twice (a non-idempotent method without an
    #: ``Idempotency-Key``, or a body stream that cannot be rewound).
    NOT_REPLAYABLE = "not_replayable"
    #: The call's ``max_attempts`` are used up.
    ATTEMPTS = "attempts"
    #: The wait needed is longer than what is left of the call's deadline.
    DEADLINE = "deadline"
    #: A ``Retry-After`` on an answer that is not a 429/503, ignored.
    HEADER_ON_SUCCESS = "header_on_success"
    #: The host's category changed.
    CATEGORY = "category"
    #: The host's category was judged for the first time (it was ``unknown``): news, not a
    #: warning.
    FIRST_JUDGED = "first_judged"

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, init=False)
class Decision:
    """One decision of the adapter, as passed to the ``on_decision`` hook and logged.

    Attributes:
        event: what was decided, an :class:`Event` (a ``str``: ``"sleep"``, ``"hold"``,
            ``"refuse"``, ``"give_up"``, ``"wait"``, ``"ignore"`` or ``"category"``). A
            retry is one ``sleep`` whose ``wait`` is the whole wait before the next attempt;
            a ``wait`` is a wait of its own (pacing, or another call's refusal).
        host: the host key.
        wait: seconds decided (0 when none).
        reason: why, in words (for people: the wording may change).
        status: the response status (0 when none).
        header: what ``Retry-After`` asked for in seconds, if usable.
        trusted: whether the header was obeyed as sent.
        category: the host's category when deciding, a
            :class:`~requests_retryafter.Category` (a ``str``).
        attempt: the call's attempt number (1 for the first request).
        until: epoch seconds when a hold ends (0 otherwise).
        code: why, as a :class:`Code` (a ``str``; the reason's wording may change, the code
            does not), or ``""`` for a decision built without one.
    """

    event: Event
    host: str
    wait: float
    reason: str
    status: int
    header: Optional[float]
    trusted: bool
    category: Category
    attempt: int
    until: float
    code: Union[Code, str]

    def __init__(
        self,
        event: Union[Event, str],
        host: str,
        wait: float = 0.0,
        reason: str = "",
        status: int = 0,
        header: Optional[float] = None,
        trusted: bool = False,
        category: Union[Category, str] = Category.UNKNOWN,
        attempt: int = 0,
        until: float = 0.0,
        code: Union[Code, str] = "",
    ) -> None:
        values = {
            "event": Event(event),
            "host": host,
            "wait": wait,
            "reason": reason,
            "status": status,
            "header": header,
            "trusted": trusted,
            "category": Category(category),
            "attempt": attempt,
            "until": until,
            "code": Code(code) if code else "",
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
