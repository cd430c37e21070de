"""What is known about one host, as a frozen value that stores keep as JSON.

Stored state carries no credentials, no paths and no query strings: only the host key, the
host's category, bounded observations, the learned limit and the shared waits (as epoch
seconds, so that other processes and later runs can honour them).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlsplit

__all__ = [
    "CATEGORIES",
    "SCHEMA_VERSION",
    "HostState",
    "UnsupportedSchema",
    "LimitEstimate",
    "Observation",
    "host_key",
]

#: Version of the stored JSON layout; a store holding another version starts fresh.
SCHEMA_VERSION = 1

#: Every value :attr:`HostState.category` takes.
CATEGORIES = (
    "unknown",
    "truthful",
    "always_zero",
    "constant_overstated",
    "unreliable",
    "absent",
)

#: Observations kept per host (a rolling window; the judge looks at the newest of them).
MAX_OBSERVATIONS = 32
#: Points of learned-limit history kept per host (for reports).
MAX_LIMIT_HISTORY = 32
#: A worker not heard from for this many seconds no longer shares a host's pace.
WORKER_TTL = 30.0

_DEFAULT_PORTS = {"http": 80, "https": 443}


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

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Observation:
        """Build from :meth:`to_dict`'s output; raises ``ValueError`` on a malformed dict."""
        try:
            return cls(
                at=float(data["at"]),
                status=int(data["status"]),
                header=None if data.get("header") is None else float(data["header"]),
                form=data.get("form"),
                recovered=None if data.get("recovered") is None else float(data["recovered"]),
                failed_until=float(data.get("failed_until", 0.0)),
                countdown=data.get("countdown"),
                served=int(data.get("served", 0)),
                span=float(data.get("span", 0.0)),
                misses=int(data.get("misses", 0)),
                scattered=bool(data.get("scattered", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
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

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> LimitEstimate:
        """Build from :meth:`to_dict`'s output; raises ``ValueError`` on a malformed dict."""
        try:
            return cls(
                rate=float(data["rate"]),
                window=None if data.get("window") is None else float(data["window"]),
                documented=None if data.get("documented") is None else float(data["documented"]),
                updated_at=float(data.get("updated_at", 0.0)),
                source=str(data.get("source", "observed")),
                burst=None if data.get("burst") is None else int(data["burst"]),
                anchor=None if data.get("anchor") is None else float(data["anchor"]),
                by=str(data.get("by", "")),
                even=bool(data.get("even", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed limit: {exc}") from exc


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
        held_until: epoch seconds until which the host is held (calls raise ``HostHeld``).
        hold_reason: why it is held.
        category_changed_at: epoch seconds of the last change of category.
        updated_at: epoch seconds of the last change.
        workers: ``(worker id, epoch last seen)`` of the adapters pacing this host through a
            shared store; the learned rate is split between those seen lately.
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
    version: int = field(default=SCHEMA_VERSION, repr=False)

    def replace(self, **changes: Any) -> HostState:
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

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
        history = sorted(set(self.limit_history) | set(other.limit_history))[-MAX_LIMIT_HISTORY:]
        return newer.replace(
            observations=_merge_observations(older.observations, newer.observations),
            blocked_until=max(self.blocked_until, other.blocked_until),
            held_until=hold.held_until,
            hold_reason=hold.hold_reason,
            limit_history=tuple(history),
            category_changed_at=max(self.category_changed_at, other.category_changed_at),
            workers=_merge_workers(self.workers, other.workers),
            limit=_merge_limits(newer.limit, older.limit),
        )

    def active_worker_ids(self, wall: float) -> Tuple[str, ...]:
        """The sorted ids of the workers seen within :data:`WORKER_TTL` of ``wall``."""
        return tuple(sorted(w for w, seen in self.workers if wall - seen <= WORKER_TTL))

    def with_worker(self, worker: str, wall: float) -> HostState:
        """Return a copy recording that ``worker`` paces this host at ``wall``."""
        return self.replace(workers=_merge_workers(self.workers, ((worker, wall),)))

    def to_dict(self) -> Dict[str, Any]:
        """Return a JSON-compatible dict with a schema version field ``"v"``."""
        return {
            "v": SCHEMA_VERSION,
            "host": self.host,
            "category": self.category,
            "evidence": self.evidence,
            "observations": [o.to_dict() for o in self.observations],
            "limit": None if self.limit is None else self.limit.to_dict(),
            "limit_history": [list(p) for p in self.limit_history],
            "blocked_until": self.blocked_until,
            "held_until": self.held_until,
            "hold_reason": self.hold_reason,
            "category_changed_at": self.category_changed_at,
            "updated_at": self.updated_at,
            "workers": [list(w) for w in self.workers],
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> HostState:
        """Build from :meth:`to_dict`'s output.

        Raises:
            ValueError: the dict has another schema version or is malformed.
        """
        if not isinstance(data, dict):
            raise ValueError("host state is not an object")
        if data.get("v") != SCHEMA_VERSION:
            raise UnsupportedSchema(f"unsupported schema version {data.get('v')!r}")
        try:
            category = str(data.get("category", "unknown"))
            if category not in CATEGORIES:
                raise ValueError(f"unknown category {category!r}")
            limit = data.get("limit")
            return cls(
                host=str(data["host"]),
                category=category,
                evidence=str(data.get("evidence", "")),
                observations=tuple(Observation.from_dict(o) for o in data.get("observations", []))[
                    -MAX_OBSERVATIONS:
                ],
                limit=None if limit is None else LimitEstimate.from_dict(limit),
                limit_history=tuple((float(a), float(b)) for a, b in data.get("limit_history", []))[
                    -MAX_LIMIT_HISTORY:
                ],
                blocked_until=float(data.get("blocked_until", 0.0)),
                held_until=float(data.get("held_until", 0.0)),
                hold_reason=str(data.get("hold_reason", "")),
                category_changed_at=float(data.get("category_changed_at", 0.0)),
                updated_at=float(data.get("updated_at", 0.0)),
                workers=tuple((str(w), float(t)) for w, t in data.get("workers", [])),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed host state: {exc}") from exc

    def to_json(self) -> str:
        """Serialise to compact JSON text."""
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HostState:
        """Parse :meth:`to_json`'s output; raises ``ValueError`` on bad text or schema."""
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"host state is not JSON: {exc}") from exc
        return cls.from_dict(data)


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
    return dataclasses.replace(newer, burst=burst, window=window, rate=burst / window, even=even)


def _merge_workers(
    a: Tuple[Tuple[str, float], ...], b: Tuple[Tuple[str, float], ...]
) -> Tuple[Tuple[str, float], ...]:
    seen: Dict[str, float] = {}
    for worker, wall in a + b:
        seen[worker] = max(wall, seen.get(worker, wall))
    newest = max(seen.values(), default=0.0)
    return tuple(sorted((w, t) for w, t in seen.items() if newest - t <= 2 * WORKER_TTL))


def _merge_observations(
    old: Tuple[Observation, ...], new: Tuple[Observation, ...]
) -> Tuple[Observation, ...]:
    by_key: Dict[Tuple[float, int], Observation] = {}
    for obs in old + new:
        key = (round(obs.at, 3), obs.status)
        seen = by_key.get(key)
        # Keep the most complete record of an episode: one that saw recovery wins.
        if seen is None or (seen.recovered is None) or obs.recovered is not None:
            by_key[key] = obs
    ordered = sorted(by_key.values(), key=lambda o: o.at)
    return tuple(ordered[-MAX_OBSERVATIONS:])
