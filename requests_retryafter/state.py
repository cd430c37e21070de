"""What is known about one host, as a frozen value that stores keep as JSON.

Stored state carries no credentials, no paths and no query strings: only the host key, the
host's category, bounded observations, the learned limit and the shared waits (as epoch
seconds, so that other processes and later runs can honour them).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar
from urllib.parse import urlsplit

_T = TypeVar("_T")

__all__ = [
    "CATEGORIES",
    "Category",
    "SCHEMA_VERSION",
    "HostState",
    "UnsupportedSchema",
    "LimitEstimate",
    "Observation",
    "Search",
    "host_key",
]

#: Version of the stored JSON layout; a store holding another version starts fresh.
SCHEMA_VERSION = 1


class Category(str, Enum):
    """A host's ``Retry-After`` behaviour, as judged from evidence (the five kinds of
    DOMAIN.md, and ``unknown`` before any evidence). A ``str`` enum:
    ``Category.TRUTHFUL == "truthful"``; stores keep its value.

    .. versionadded:: 0.2.0
    """

    #: Not judged yet (no rejection episode, or too few to tell).
    UNKNOWN = "unknown"
    #: The header tells when the host will answer again.
    TRUTHFUL = "truthful"
    #: The header says 0 (or is in the past) whatever the host does.
    ALWAYS_ZERO = "always_zero"
    #: The header is one long value, far longer than the host really takes.
    CONSTANT_OVERSTATED = "constant_overstated"
    #: The header varies with no relation to the host's recovery.
    UNRELIABLE = "unreliable"
    #: The host sends no usable header.
    ABSENT = "absent"

    def __str__(self) -> str:
        return str(self.value)


#: Every value :attr:`HostState.category` takes.
CATEGORIES = tuple(c.value for c in Category)

#: Observations kept per host (a rolling window; the judge looks at the newest of them).
MAX_OBSERVATIONS = 32
#: Points of learned-limit history kept per host (for reports).
MAX_LIMIT_HISTORY = 32
#: A worker not heard from for this many seconds no longer shares a host's pace (one that
#: closed its adapter, or whose process exited, stops sharing it at once: ``HostState.left``).
WORKER_TTL = 30.0

_DEFAULT_PORTS = {"http": 80, "https": 443}

# Bounds of stored values. A value outside them (a NaN, a negative duration, a window of
# 1e-310 s, a hold until the year 30000) is not evidence but damage: the entry is refused and
# the host starts fresh, rather than letting one bad number stall or crash every call.
#: Epoch seconds: no later than the year 5138.
MAX_EPOCH = 1e11
#: A duration in seconds: about 30 years.
MAX_SECONDS = 1e9
#: A count of requests or episodes.
MAX_COUNT = 1e9
#: Requests per second: a rate of 0 is no rate; 10**6/s is more than any HTTP host answers.
MIN_RATE, MAX_RATE = 0.0, 1e6
#: The slowest rate a shared search stores: one request in :data:`MAX_SECONDS` (a slower one
#: would put the schedule's next send past :data:`MAX_EPOCH`).
MIN_SEARCH_RATE = 1.0 / MAX_SECONDS
#: The shortest window: a millisecond (below it a rate means nothing for HTTP).
MIN_WINDOW = 1e-3

#: The fields :meth:`HostState.to_dict` writes; any other field of a stored entry (written by a
#: newer version) is kept as it is in :attr:`HostState.extra` and written back unchanged.
_KNOWN_FIELDS = frozenset(
    {
        "v",
        "host",
        "category",
        "evidence",
        "observations",
        "limit",
        "limit_history",
        "blocked_until",
        "next_send",
        "last_send",
        "search",
        "blocked_since",
        "held_until",
        "held_since",
        "hold_reason",
        "category_changed_at",
        "updated_at",
        "workers",
        "left",
        "even_pace",
        "even_pace_at",
        "stated_refuted",
        "stated_refuted_at",
    }
)


def _number(value: Any, name: str, low: float, high: float, *, low_open: bool = False) -> float:
    """``value`` as a finite float within ``[low, high]`` (``(low, high]`` with
    ``low_open``), or ``ValueError`` naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} is not a number: {value!r}")
    number = float(value)
    if not math.isfinite(number) or number > high or number < low or (low_open and number == low):
        raise ValueError(f"{name} out of range: {value!r}")
    return number


def _optional_str(value: Any, name: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} is not a string: {value!r}")


def _optional_bool(value: Any, name: str) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{name} is not true, false or null: {value!r}")


class UnsupportedSchema(ValueError):
    """A stored host entry was written by another (newer) version of this library.

    Stores treat such an entry as absent for this process and leave it as it is: they never
    overwrite or delete what they do not understand.
    """


def host_key(url: str) -> str:
    """Return the key under which a URL's host is known: lowercase host, plus ``:port`` when
    the port is not the scheme's default. Never includes userinfo, path or query.

    >>> host_key("https://user:pw@API.Example.org:443/v1?token=x")
    'api.example.org'
    >>> host_key("http://127.0.0.1:8080/")
    '127.0.0.1:8080'
    """
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port_text = netloc.rpartition(":")[2] if netloc.count(":") == 1 else ""
        return f"{host}:{port_text}" if port_text else host
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        return f"{host}:{port}"
    return host


@dataclass(frozen=True)
class Observation:
    """One rejection episode: from a 429/503 until the host next answered 2xx.

    Attributes:
        at: epoch seconds of the first rejection of the episode.
        status: its status code (429 or 503).
        header: the wait its ``Retry-After`` asked for, in seconds (``None``: absent or unusable).
        form: ``"delta"`` or ``"date"`` (``None`` with no usable header).
        recovered: seconds from ``at`` until the host next answered 2xx (an upper bound of the
            real recovery; ``None`` when it has not been seen).
        failed_until: seconds from ``at`` of the last rejection in the episode (a lower bound).
        countdown: ``True`` when later rejections' headers counted down to the same reset
            time, ``False`` when they stayed put, ``None`` when not seen.
        served: requests the host answered 2xx in the streak before the rejection.
        span: seconds over which those requests were sent.
        misses: times in the episode the host still refused when an obeyed header said it
            would be ready.
        scattered: whether the episode's headers pointed at reset moments far apart (a
            truthful host's headers all point at the same one).
        at_random: whether the refusal was taken for one at random, not the limit's (over
            by the first retry, partway through a window's budget): its recovery is no
            window start, and locates none on the clock.
    """

    at: float
    status: int
    header: Optional[float]
    form: Optional[str] = None
    recovered: Optional[float] = None
    failed_until: float = 0.0
    countdown: Optional[bool] = None
    served: int = 0
    span: float = 0.0
    misses: int = 0
    scattered: bool = False
    at_random: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Observation:
        """Build from :meth:`to_dict`'s output; raises ``ValueError`` on a malformed dict or an
        out-of-range value (a NaN, a negative duration, a time no clock reaches)."""
        try:
            header, recovered = data.get("header"), data.get("recovered")
            return cls(
                at=_number(data["at"], "at", 0.0, MAX_EPOCH),
                status=int(_number(data["status"], "status", 100, 599)),
                header=None if header is None else _number(header, "header", 0.0, MAX_SECONDS),
                form=_optional_str(data.get("form"), "form"),
                recovered=None
                if recovered is None
                else _number(recovered, "recovered", 0.0, MAX_SECONDS),
                failed_until=_number(data.get("failed_until", 0.0), "failed_until", 0, MAX_SECONDS),
                countdown=_optional_bool(data.get("countdown"), "countdown"),
                served=int(_number(data.get("served", 0), "served", 0, MAX_COUNT)),
                span=_number(data.get("span", 0.0), "span", 0.0, MAX_SECONDS),
                misses=int(_number(data.get("misses", 0), "misses", 0, MAX_COUNT)),
                scattered=bool(data.get("scattered", False)),
                at_random=bool(_optional_bool(data.get("at_random"), "at_random")),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed observation: {exc}") from exc


@dataclass(frozen=True)
class LimitEstimate:
    """A host's rate limit as learned from what it did (and what it stated).

    The host lets about ``burst`` requests through per ``window`` seconds (``rate`` is their
    ratio): the adapter sends at most ``burst`` per window, in one go at the window's start,
    as a perfect client of a fixed or sliding window would.

    Attributes:
        rate: requests per second the host lets through (estimated enforced limit).
        window: the window length in seconds, when one could be estimated.
        burst: requests the host let through in one window, when observed.
        anchor: epoch seconds of a moment a window started (a recovery), so that a later run
            can keep in step with a host's fixed windows.
        by: the id of the worker whose observation gave the estimate (workers sharing a
            store each see a share of the host: their concurrent estimates are averaged).
        documented: requests per second the host states (``RateLimit``/``X-RateLimit-*``), if any.
        updated_at: epoch seconds of the last change.
        source: ``"observed"`` or ``"stated"``.
        even: the host behaves as a token bucket (its depth refused one request more at a
            window's start, yet it recovered at the first retry): each window's budget is
            spread evenly across the window instead of sent at its start.
        shortest: the shortest ``window`` the evidence allows, when the window was measured
            between a last refusal and a recovery found later: the host's window is longer
            than this and at most ``window``. While the two are more than
            ``Tuning.search_gap`` apart, shorter windows are probed between them. With an
            ``anchor``, the lattice is on trial: longer than the episode that located it
            measured (a shorter window that holds drops the anchor).
            ``None``: the window is taken as exact (or was not measured so).
        held: spread evenly, the budget per ``window`` that held before the last probe
            kept raised it to ``burst`` (or a step under way when the adapter closed). That
            rate stays on trial until the next probe (in this run or the next): a refusal
            of it goes back to ``held``. ``None``: no rate on trial.
        peak: the rate (requests per second) paced before refusals outside a probe cut it
            to ``rate`` (spread evenly, or a window's budget), since the last probe (in this
            run or, stored, the next). A probe goes back to it once the cut pace held
            ``Tuning.spread_probe_hold`` without a refusal (like TCP CUBIC's window before
            a loss): a refusal at random, not of the rate, cost only that long. ``None``: not
            cut since the last probe.
        shares: the workers sharing the host when ``by`` learned the estimate. Each sees
            only its share of the host, so ``rate`` is that worker's take times this: a
            guess when above 1, which the workers' shared search probes from the take; 1:
            learned alone, or not by a worker.
        opening: the requests the host let through at once at a run's start, unpaced,
            before its first refusal (more than one), when it then showed itself a sliding
            window counter (its budget, not a token bucket's depth). A run's first requests
            to a host paced evenly go at once, as many, and the next when its window may
            turn. ``None``: not seen.
        opening_clock: whether the host's window, shut by such a burst, turned at the
            boundary of the clock a later run's first request after it waited for
            (``None``: not tried). Where it did not, later runs wait no more for it.

    .. versionchanged:: 0.2.0
       ``shares``, ``held``, ``peak``, ``opening``, ``opening_clock``.
    """

    rate: float
    window: Optional[float] = None
    documented: Optional[float] = None
    updated_at: float = 0.0
    source: str = "observed"
    burst: Optional[int] = None
    anchor: Optional[float] = None
    by: str = ""
    even: bool = False
    shortest: Optional[float] = None
    shares: int = 1
    held: Optional[int] = None
    peak: Optional[float] = None
    opening: Optional[int] = None
    opening_clock: Optional[bool] = None

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> LimitEstimate:
        """Build from :meth:`to_dict`'s output; raises ``ValueError`` on a malformed dict or an
        out-of-range value."""
        try:
            window, documented = data.get("window"), data.get("documented")
            burst, anchor = data.get("burst"), data.get("anchor")
            shortest, held = data.get("shortest"), data.get("held")
            peak, opening = data.get("peak"), data.get("opening")
            return cls(
                rate=_number(data["rate"], "rate", MIN_RATE, MAX_RATE, low_open=True),
                window=None
                if window is None
                else _number(window, "window", MIN_WINDOW, MAX_SECONDS),
                documented=None
                if documented is None
                else _number(documented, "documented", MIN_RATE, MAX_RATE, low_open=True),
                updated_at=_number(data.get("updated_at", 0.0), "updated_at", 0.0, MAX_EPOCH),
                source=str(data.get("source", "observed")),
                burst=None if burst is None else int(_number(burst, "burst", 1, MAX_COUNT)),
                anchor=None if anchor is None else _number(anchor, "anchor", 0.0, MAX_EPOCH),
                by=str(data.get("by", "")),
                even=bool(data.get("even", False)),
                shortest=None
                if shortest is None
                else _number(shortest, "shortest", MIN_WINDOW, MAX_SECONDS),
                shares=int(_number(data.get("shares", 1), "shares", 1, MAX_COUNT)),
                held=None if held is None else int(_number(held, "held", 1, MAX_COUNT)),
                peak=None
                if peak is None
                else _number(peak, "peak", MIN_RATE, MAX_RATE, low_open=True),
                opening=None if opening is None else int(_number(opening, "opening", 1, MAX_COUNT)),
                opening_clock=_optional_bool(data.get("opening_clock"), "opening_clock"),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed limit: {exc}") from exc


@dataclass(frozen=True)
class Search:
    """The search for an evenly paced host's rate, kept in the store and shared by the workers
    that pace the host together (see :mod:`requests_retryafter._search` for its transitions).

    Attributes:
        rate: requests per second all the workers together send at now (above ``held`` while
            a probe is under way).
        held: the largest rate shown to hold.
        ceiling: the smallest rate refused since the search began (0: none).
        since: epoch seconds of the first slot on the schedule at ``rate`` (when it was
            set, or, with slots taken ahead at the rate before, the first free one after
            them; cut by a refusal, no sooner than the end of the host's wait it brought;
            for a new search, its second slot: the first follows requests sent off
            the schedule (a gap after them, from a learned limit; at once, from a stated
            budget); for a search started from a budget the host states, a
            window after it started: the host still counts what the workers sent before
            it). A refusal of a request whose slot came before then answered an earlier
            rate, or those requests, which that change already dealt with.
        lower: ``held`` is only a lower bound: probes double until one is refused.
        misses: probes refused in a row since the search was last over (they space the next
            probe further apart).
        sends: slots taken on the schedule since ``rate`` was set (a probe holds only once
            a hold's worth of requests went at it, not merely a hold's time).
        most: the fastest rate the search may try (0: no bound): ``utilization`` of the
            budget the host states, while it states one (kept here, so that a worker that
            has not read the statements yet keeps to it too).

    .. versionadded:: 0.2.0
    """

    rate: float
    held: float
    ceiling: float = 0.0
    since: float = 0.0
    lower: bool = False
    misses: int = 0
    sends: int = 0
    most: float = 0.0

    @property
    def probing(self) -> bool:
        """Whether a rate above the one that held is being tried."""
        return self.rate > self.held

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Search:
        """Build from :meth:`to_dict`'s output; raises ``ValueError`` on a malformed dict or an
        out-of-range value."""
        try:
            return cls(
                rate=_number(data["rate"], "rate", MIN_SEARCH_RATE, MAX_RATE),
                held=_number(data["held"], "held", MIN_SEARCH_RATE, MAX_RATE),
                ceiling=_number(data.get("ceiling", 0.0), "ceiling", MIN_RATE, MAX_RATE),
                since=_number(data.get("since", 0.0), "since", 0.0, MAX_EPOCH),
                lower=bool(data.get("lower", False)),
                misses=int(_number(data.get("misses", 0), "misses", 0, MAX_COUNT)),
                sends=int(_number(data.get("sends", 0), "sends", 0, MAX_COUNT)),
                most=_number(data.get("most", 0.0), "most", 0.0, MAX_RATE),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed search: {exc}") from exc


@dataclass(frozen=True)
class HostState:
    """Everything known about one host. Immutable: derive new states with :meth:`replace`.

    Attributes:
        host: the host key (see :func:`host_key`).
        category: one of :data:`CATEGORIES`.
        evidence: a short sentence saying why the host has its category.
        observations: the newest rejection episodes, oldest first (at most 32).
        limit: the learned limit, if any.
        limit_history: ``(epoch, requests per second)`` points, oldest first.
        blocked_until: epoch seconds before which no request may go to the host (a shared wait).
        blocked_since: epoch seconds when that wait was granted (0: not known). A wait never
            lasts longer than it was granted for, even when the wall clock steps back.
        held_until: epoch seconds until which the host is held (calls raise ``HostHeld``).
        held_since: epoch seconds when that hold began (0: not known); bounds it likewise.
        hold_reason: why it is held.
        category_changed_at: epoch seconds of the last change of category.
        updated_at: epoch seconds of the last change.
        workers: ``(worker id, epoch last seen)`` of the adapters pacing this host through a
            shared store; the learned rate is split between those seen lately.
        left: ``(worker id, epoch it left)`` of those workers whose adapter was closed (or
            whose process exited) since they were last seen: they no longer share the pace,
            though seen lately (a run that follows another on the same store within
            :data:`WORKER_TTL` is not one of two). A worker seen again later is counted again.
        next_send: epoch seconds of the next free send on the host's shared schedule: workers
            sharing a store take turns on it when the host is paced evenly (0: none yet).
        last_send: epoch seconds at which the last send on that schedule went (0: none
            yet): the next goes no sooner than a gap after it, however late that one was.
        search: the search for the rate of that schedule, shared by those workers (``None``
            until workers share an evenly paced host).
        even_pace: ``(requests per second, seconds)``: an even pace that did better than the
            host's statements of what remains (a trial's, see
            ``requests_retryafter._stated_trial``), and how long its step lasted; a worker
            alone in the next run starts from it, and drops it if it is refused within its
            step's span in that run (``None``: none kept).
        even_pace_at: epoch seconds when ``even_pace`` was last kept or dropped (0: never): a
            merge takes the pace of the entry that set it last.
        stated_refuted: whether the host's answers saying none of its window remains, until
            a reset further away than ``max_sleep``, were refuted by its own answers (the
            probes sent before such resets let through, ``Tuning.refuted_resets`` times in a
            row): they are not waited for, in this run or the next, until the host refuses
            (see ``requests_retryafter._stated``).
        stated_refuted_at: epoch seconds when ``stated_refuted`` was last set or cleared (0:
            never): a merge takes the entry that set it last.
        extra: fields of the stored entry this version does not know (written by a newer
            one), as ``(name, JSON text)`` pairs, written back unchanged.
    """

    host: str
    category: str = "unknown"
    evidence: str = ""
    observations: Tuple[Observation, ...] = ()
    limit: Optional[LimitEstimate] = None
    limit_history: Tuple[Tuple[float, float], ...] = ()
    blocked_until: float = 0.0
    held_until: float = 0.0
    hold_reason: str = ""
    category_changed_at: float = 0.0
    updated_at: float = 0.0
    workers: Tuple[Tuple[str, float], ...] = ()
    blocked_since: float = 0.0
    held_since: float = 0.0
    next_send: float = 0.0
    search: Optional[Search] = None
    last_send: float = 0.0
    left: Tuple[Tuple[str, float], ...] = ()
    even_pace: Optional[Tuple[float, float]] = None
    even_pace_at: float = 0.0
    stated_refuted: bool = False
    stated_refuted_at: float = 0.0
    extra: Tuple[Tuple[str, str], ...] = field(default=(), repr=False)
    version: int = field(default=SCHEMA_VERSION, repr=False)

    def replace(self, **changes: Any) -> HostState:
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def checked(self) -> HostState:
        """This state if every value is in range (as :meth:`from_dict` requires of stored
        ones), else ``ValueError``: for states a store hands over as objects.

        .. versionadded:: 0.1.0
        """
        HostState.from_dict(self.to_dict())
        return self

    def with_observation(self, obs: Observation) -> HostState:
        """Return a copy with ``obs`` added (replacing one of the same episode)."""
        return self.replace(observations=_merge_observations(self.observations, (obs,)))

    def merge(self, other: Optional[HostState]) -> HostState:
        """Combine what two writers know of the same host, losing neither's observations.

        Observations are united (keyed by episode start and status); waits and holds take the
        later end; the limit, category and evidence come from whichever state changed last.
        The result is the same whichever side is ``self``, except for ties.
        """
        if other is None or other is self:
            return self
        newer, older = (self, other) if self.updated_at >= other.updated_at else (other, self)
        hold = newer if newer.held_until >= older.held_until else older
        block = self if self.blocked_until >= other.blocked_until else other
        history = sorted(set(self.limit_history) | set(other.limit_history))[-MAX_LIMIT_HISTORY:]
        workers = _merge_workers(self.workers, other.workers)
        pace = self if self.even_pace_at >= other.even_pace_at else other
        refuted = self if self.stated_refuted_at >= other.stated_refuted_at else other
        return newer.replace(
            observations=_merge_observations(older.observations, newer.observations),
            blocked_until=block.blocked_until,
            blocked_since=block.blocked_since,
            held_until=hold.held_until,
            held_since=hold.held_since,
            hold_reason=hold.hold_reason,
            extra=tuple(sorted(dict(older.extra + newer.extra).items())),
            limit_history=tuple(history),
            category_changed_at=max(self.category_changed_at, other.category_changed_at),
            workers=workers,
            left=_merge_left(self.left, other.left, workers),
            next_send=max(self.next_send, other.next_send),
            last_send=max(self.last_send, other.last_send),
            search=_merge_searches(self.search, other.search),
            limit=_merge_limits(newer.limit, older.limit),
            even_pace=pace.even_pace,
            even_pace_at=pace.even_pace_at,
            stated_refuted=refuted.stated_refuted,
            stated_refuted_at=refuted.stated_refuted_at,
        )

    def active_worker_ids(self, wall: float) -> Tuple[str, ...]:
        """The sorted ids of the workers seen within :data:`WORKER_TTL` of ``wall`` and not
        gone since (see ``left``)."""
        gone = dict(self.left)
        return tuple(
            sorted(
                w
                for w, seen in self.workers
                if wall - seen <= WORKER_TTL and gone.get(w, -1.0) < seen
            )
        )

    def with_send_taken(self, gap: float, window: float, wall: float) -> Tuple[HostState, float]:
        """Take the next send on the host's shared schedule: ``(a copy with the schedule moved
        on, the epoch time of this send)``. The send goes at the schedule's next free time
        (``wall``, if that is past) and the next free time moves ``gap`` later. A next free
        time more than a ``window`` ahead is not believed (a worker's clock stepped, or its
        sends stopped): the schedule starts again at ``wall``. The adapter applies it in one
        atomic store update.

        .. versionadded:: 0.2.0
        """
        slot = self.next_slot(window, wall)
        return self.replace(next_send=slot + gap), slot

    def next_slot(self, window: float, wall: float) -> float:
        """The epoch time of the next send on the host's shared schedule, taken at ``wall``
        (see :meth:`with_send_taken`, which takes it).

        .. versionadded:: 0.2.0
        """
        slot = self.next_send
        return wall if slot < wall or slot - wall > window else slot

    def with_send_spaced(self, gap: float, wall: float) -> Tuple[HostState, float]:
        """Space a send that is about to go on the host's shared schedule: ``(a copy recording
        it, seconds to wait before it)``. A slot taken ahead is ``gap`` after the one before
        it, but a worker that woke late for that one sent it late, and the next, on time,
        would then follow it closer than the gap (a bucket without a burst refuses it): so
        the send waits until a gap after the last one that went. A last send further ahead
        than a gap is not believed (another machine's clock): the wait is at most a gap.
        The adapter applies it in one atomic store update just before sending.

        .. versionadded:: 0.2.0
        """
        wait = min(max(0.0, self.last_send + gap - wall), gap)
        return self.replace(last_send=wall + wait), wait

    def with_worker(self, worker: str, wall: float) -> HostState:
        """Return a copy recording that ``worker`` paces this host at ``wall``."""
        return self.replace(workers=_merge_workers(self.workers, ((worker, wall),)))

    def with_worker_left(self, worker: str, wall: float) -> HostState:
        """Return a copy recording that ``worker`` stopped pacing this host at ``wall`` (its
        adapter was closed): the others no longer count it, from their next read of the store.

        .. versionadded:: 0.2.0
        """
        seen = dict(self.workers).get(worker)
        if seen is None:
            return self
        left = _merge_left(self.left, ((worker, max(wall, seen)),), self.workers)
        return self.replace(left=left)

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict with a schema version field ``"v"``."""
        data: Dict[str, Any] = {name: json.loads(text) for name, text in self.extra}
        data.update(self._known_dict())
        return data

    def _known_dict(self) -> Dict[str, Any]:
        return {
            "v": SCHEMA_VERSION,
            "host": self.host,
            "category": str(self.category),
            "evidence": self.evidence,
            "observations": [o.to_dict() for o in self.observations],
            "limit": None if self.limit is None else self.limit.to_dict(),
            "limit_history": [list(p) for p in self.limit_history],
            "blocked_until": self.blocked_until,
            "blocked_since": self.blocked_since,
            "held_until": self.held_until,
            "held_since": self.held_since,
            "hold_reason": self.hold_reason,
            "category_changed_at": self.category_changed_at,
            "updated_at": self.updated_at,
            "workers": [list(w) for w in self.workers],
            "left": [list(w) for w in self.left],
            "next_send": self.next_send,
            "last_send": self.last_send,
            "search": None if self.search is None else self.search.to_dict(),
            "even_pace": None if self.even_pace is None else list(self.even_pace),
            "even_pace_at": self.even_pace_at,
            "stated_refuted": self.stated_refuted,
            "stated_refuted_at": self.stated_refuted_at,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any], dropped: Optional[List[str]] = None) -> HostState:
        """Build from :meth:`to_dict`'s output.

        Args:
            data: the dict.
            dropped: if a list, a malformed part (one observation, the limit, a hold's end,
                ...) is left out instead, and what was left out and why is appended to it:
                the rest of what was learned is kept. Only a dict of another schema version,
                or without a host name, is refused whole.

        Raises:
            ValueError: the dict has another schema version or is malformed (with
                ``dropped``: has no host name, or is not a dict).
        """
        return _state_from_dict(cls, data, dropped)

    def to_json(self) -> str:
        """Serialise to compact JSON text (never ``NaN`` or ``Infinity``: ``ValueError``)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, dropped: Optional[List[str]] = None) -> HostState:
        """Parse :meth:`to_json`'s output; raises ``ValueError`` on bad text or schema
        (``dropped`` as for :meth:`from_dict`)."""
        try:
            data = json.loads(text)
        except (TypeError, RecursionError, json.JSONDecodeError) as exc:
            raise ValueError(f"host state is not JSON: {type(exc).__name__}: {exc}") from exc
        return cls.from_dict(data, dropped)


_S = TypeVar("_S", bound="HostState")


def _state_from_dict(cls: Type[_S], data: Dict[str, Any], dropped: Optional[List[str]]) -> _S:
    """:meth:`HostState.from_dict`'s work (see there), out of the class to keep it short."""
    if not isinstance(data, dict):
        raise ValueError("host state is not an object")
    version = data.get("v")
    if version != SCHEMA_VERSION:
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            raise UnsupportedSchema(f"written by a newer version (schema {version})")
        raise ValueError(f"unknown schema version {version!r}")
    malformed = (AttributeError, KeyError, TypeError, ValueError, RecursionError)

    def part(name: str, build: Callable[[], _T], default: _T) -> _T:
        if dropped is None:
            return build()
        try:
            return build()
        except malformed as exc:
            dropped.append(f"{name} ({type(exc).__name__}: {exc})")
            return default

    def epoch(name: str) -> float:
        return part(name, lambda: _number(data.get(name, 0.0), name, 0.0, MAX_EPOCH), 0.0)

    def each(name: str, build: Callable[[Any], _T]) -> Tuple[_T, ...]:
        items: List[Any] = part(name, lambda: list(data.get(name, [])), [])
        kept: List[_T] = []
        for i, item in enumerate(items):
            kept.extend(part(f"{name}[{i}]", functools.partial(_one, build, item), []))
        return tuple(kept)

    try:
        host = data["host"]
        if not isinstance(host, str) or not host:
            raise ValueError(f"host is not a name: {host!r}")
        limit, search = data.get("limit"), data.get("search")
        return cls(
            host=host,
            category=part("category", lambda: _category(data), "unknown"),
            evidence=str(data.get("evidence", "")),
            observations=each("observations", Observation.from_dict)[-MAX_OBSERVATIONS:],
            limit=None
            if limit is None
            else part("limit", lambda: LimitEstimate.from_dict(limit), None),
            limit_history=each("limit_history", _history_point)[-MAX_LIMIT_HISTORY:],
            blocked_until=epoch("blocked_until"),
            blocked_since=epoch("blocked_since"),
            held_until=epoch("held_until"),
            held_since=epoch("held_since"),
            hold_reason=str(data.get("hold_reason", "")),
            category_changed_at=epoch("category_changed_at"),
            updated_at=epoch("updated_at"),
            next_send=epoch("next_send"),
            last_send=epoch("last_send"),
            search=None
            if search is None
            else part("search", lambda: Search.from_dict(search), None),
            workers=each("workers", functools.partial(_worker_pair, "workers")),
            left=each("left", functools.partial(_worker_pair, "left")),
            even_pace=part("even_pace", lambda: _even_pace(data.get("even_pace")), None),
            even_pace_at=epoch("even_pace_at"),
            stated_refuted=part(
                "stated_refuted",
                lambda: bool(_optional_bool(data.get("stated_refuted"), "stated_refuted")),
                False,
            ),
            stated_refuted_at=epoch("stated_refuted_at"),
            extra=part(
                "extra",
                lambda: tuple(
                    sorted(
                        (str(k), json.dumps(v, allow_nan=False))
                        for k, v in data.items()
                        if k not in _KNOWN_FIELDS
                    )
                ),
                (),
            ),
        )
    except (AttributeError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(f"malformed host state: {type(exc).__name__}: {exc}") from exc


def _one(build: Callable[[Any], _T], item: Any) -> List[_T]:
    """``[build(item)]``."""
    return [build(item)]


def _category(data: Dict[str, Any]) -> str:
    """A stored entry's category, which must be one of :data:`CATEGORIES`."""
    value = str(data.get("category", "unknown"))
    if value not in CATEGORIES:
        raise ValueError(f"unknown category {value!r}")
    return value


def _history_point(pair: Any) -> Tuple[float, float]:
    """A stored ``limit_history`` point: ``(epoch, requests per second)``."""
    a, b = pair
    return _number(a, "limit_history", 0.0, MAX_EPOCH), _number(b, "limit_history", 0.0, MAX_RATE)


def _worker_pair(name: str, pair: Any) -> Tuple[str, float]:
    """A stored ``(worker id, epoch)`` of the field ``name`` (``workers``, ``left``)."""
    w, t = pair
    return str(w), _number(t, name, 0.0, MAX_EPOCH)


def _even_pace(pair: Any) -> Optional[Tuple[float, float]]:
    """A stored ``even_pace``: ``(requests per second, seconds)``, both above 0, or ``None``."""
    if pair is None:
        return None
    rate, span = pair
    return (
        _number(rate, "even_pace", MIN_RATE, MAX_RATE, low_open=True),
        _number(span, "even_pace", 0.0, MAX_SECONDS, low_open=True),
    )


def _merge_limits(
    newer: Optional[LimitEstimate], older: Optional[LimitEstimate]
) -> Optional[LimitEstimate]:
    """The newer estimate; but two workers' estimates made within a window of each other are
    each one worker's view of the same window, so they are averaged."""
    if newer is None or older is None or newer == older:
        return newer if newer is not None else older
    concurrent = (
        newer.by
        and older.by
        and newer.by != older.by
        and newer.source == older.source == "observed"
        and newer.burst
        and older.burst
        and newer.window
        and older.window
        and abs(newer.updated_at - older.updated_at) <= max(newer.window, older.window)
    )
    if not concurrent:
        return newer
    burst = max(1, round(((newer.burst or 1) + (older.burst or 1)) / 2))
    window = ((newer.window or 1.0) + (older.window or 1.0)) / 2
    even = newer.even or older.even
    shares = max(newer.shares, older.shares)
    # Each worker measured its own view of the window: the average is no bracket.
    return dataclasses.replace(
        newer,
        burst=burst,
        window=window,
        rate=burst / window,
        even=even,
        shortest=None,
        shares=shares,
    )


def _merge_searches(a: Optional[Search], b: Optional[Search]) -> Optional[Search]:
    """The search whose rate was set last, by its ``since`` (each change is made in one atomic
    store update, so the later one knows of the earlier, and no change moves ``since``
    back); of two set at once, the slower; of two copies of one, the one that counted more
    sends."""
    if a is None or b is None:
        return a if b is None else b
    return min(a, b, key=lambda s: (-s.since, s.rate, -s.sends))


def _latest(pairs: Tuple[Tuple[str, float], ...]) -> Dict[str, float]:
    """The latest epoch of each worker in ``(worker id, epoch)`` pairs."""
    latest: Dict[str, float] = {}
    for worker, wall in pairs:
        latest[worker] = max(wall, latest.get(worker, wall))
    return latest


def _merge_workers(
    a: Tuple[Tuple[str, float], ...], b: Tuple[Tuple[str, float], ...]
) -> Tuple[Tuple[str, float], ...]:
    seen = _latest(a + b)
    newest = max(seen.values(), default=0.0)
    return tuple(sorted((w, t) for w, t in seen.items() if newest - t <= 2 * WORKER_TTL))


def _merge_left(
    a: Tuple[Tuple[str, float], ...],
    b: Tuple[Tuple[str, float], ...],
    workers: Tuple[Tuple[str, float], ...],
) -> Tuple[Tuple[str, float], ...]:
    """The departures of ``a`` and ``b`` (the latest of each worker's), of the ``workers``
    still recorded (a departure is kept no longer than the heartbeat it ends)."""
    known = {w for w, _ in workers}
    return tuple(sorted((w, t) for w, t in _latest(a + b).items() if w in known))


def _merge_observations(
    old: Tuple[Observation, ...], new: Tuple[Observation, ...]
) -> Tuple[Observation, ...]:
    by_key: Dict[Tuple[float, int], Observation] = {}
    for obs in old + new:
        key = (round(obs.at, 3), obs.status)
        seen = by_key.get(key)
        # Keep the most complete record of an episode: one that saw recovery wins; taken
        # for a refusal at random by either writer, it is one.
        if seen is None or (seen.recovered is None) or obs.recovered is not None:
            if seen is not None and seen.at_random and not obs.at_random:
                obs = dataclasses.replace(obs, at_random=True)
            by_key[key] = obs
    ordered = sorted(by_key.values(), key=lambda o: o.at)
    return tuple(ordered[-MAX_OBSERVATIONS:])
