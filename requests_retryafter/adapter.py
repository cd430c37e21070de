"""``RetryAfterAdapter``: a drop-in :class:`requests.adapters.HTTPAdapter` that retries 429 and
503 the way a good citizen should, however the host's ``Retry-After`` lies.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
import threading
import uuid
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.timeout import Timeout

from ._compat import connection_retry, never_reached_server
from .clock import Clock, SystemClock
from .engine import Decision, HostTracker
from .errors import (
    ConfigurationError,
    HostHeld,
    RetryAfterError,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
    StoreError,
)
from .parsing import parse_rate_limit, parse_retry_after
from .policy import ENV_PREFIX, Policy
from .state import HostState, host_key
from .stores import MemoryStore, StateStore, open_store

__all__ = ["RetryAfterAdapter", "mount"]

log = logging.getLogger(__name__)

#: Methods RFC 9110 makes idempotent: safe to send again.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
#: Methods replayed only with an ``Idempotency-Key`` header.
KEYED_METHODS = frozenset({"POST", "PATCH"})
#: Statuses that carry a meaningful Retry-After and are retried.
REJECTIONS = frozenset({429, 503})
#: Authentication answers: never retried.
AUTH_STATUSES = frozenset({401, 403, 407})

TimeoutArg = Union[None, float, Tuple[Optional[float], Optional[float]], Any]
DecisionHook = Callable[[Decision], None]

_LEVELS = {
    "sleep": logging.INFO,
    "hold": logging.WARNING,
    "refuse": logging.INFO,
    "give_up": logging.WARNING,
    "wait": logging.DEBUG,
    "ignore": logging.DEBUG,
    "category": logging.WARNING,
}

_live_adapters: weakref.WeakSet[RetryAfterAdapter] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    for adapter in list(_live_adapters):
        adapter.flush()


class _Host:
    """An adapter's runtime for one host: the tracker plus its lock and concurrency cap."""

    __slots__ = ("last_sync", "lock", "slots", "tracker", "warned_ignore")

    def __init__(self, tracker: HostTracker, max_concurrency: int) -> None:
        self.tracker = tracker
        self.lock = threading.RLock()
        self.slots = threading.BoundedSemaphore(max_concurrency)
        self.last_sync = float("-inf")
        self.warned_ignore = False


class RetryAfterAdapter(HTTPAdapter):
    """A transport adapter that retries 429/503 itself, using ``Retry-After`` only as far as
    each host has earned, pacing each host below its learned limit.

    Mount it like any adapter::

        session = requests.Session()
        adapter = RetryAfterAdapter()
        session.mount("https://", adapter)
        session.mount("http://", adapter)

    Args:
        policy: the limits to keep; fields not given explicitly may be set by
            ``REQUESTS_RETRYAFTER_<FIELD>`` environment variables.
        store: where per-host knowledge is kept: a spec string (``memory://``,
            ``json://PATH``, ``sqlite://PATH``, ...) or a store object. Defaults to
            ``REQUESTS_RETRYAFTER_STORE`` or ``memory://``. A store given as an object is
            not closed by :meth:`close`; one opened from a spec is.
        clock: the clock for every sleep, interval and date (default :class:`SystemClock`).
        on_decision: called with every :class:`~requests_retryafter.Decision` (sleeps, holds,
            refusals, category changes), for progress displays and metrics.
        environ: the environment to read settings from (default :data:`os.environ`).
        seed: seed for the jitter's random source (for reproducible tests).
        **kwargs: :class:`~requests.adapters.HTTPAdapter`'s own arguments
            (``pool_connections``, ``pool_maxsize``, ``pool_block``, ``max_retries``).
            ``max_retries`` is for connection-level retries only; one that retries 429/503
            raises :class:`~requests_retryafter.ConfigurationError`.

    Raises:
        ConfigurationError: a bad argument or environment variable (a ``ValueError``).
    """

    __attrs__ = [*HTTPAdapter.__attrs__, "policy", "clock", "on_decision", "_store_spec"]  # noqa: RUF012

    def __init__(
        self,
        policy: Optional[Policy] = None,
        store: Union[str, StateStore, None] = None,
        clock: Optional[Clock] = None,
        *,
        on_decision: Optional[DecisionHook] = None,
        environ: Optional[Mapping[str, str]] = None,
        seed: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        env = os.environ if environ is None else environ
        self.policy = Policy.from_env(env, base=policy)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.on_decision = on_decision
        from_env = store is None and bool(env.get(ENV_PREFIX + "STORE"))
        if store is None:
            store = env.get(ENV_PREFIX + "STORE") or None
        self._store_spec: Union[str, StateStore, None] = store
        if from_env:
            try:
                self._open_store()
            except ConfigurationError as exc:
                raise ConfigurationError(f"{ENV_PREFIX}STORE: {exc}") from None
        kwargs["max_retries"] = connection_retry(kwargs.get("max_retries"))
        super().__init__(**kwargs)
        self._seed = seed
        self._setup()

    def _open_store(self) -> None:
        if getattr(self, "store", None) is not None:
            return
        spec = self._store_spec
        self._owns_store = spec is None or isinstance(spec, str)
        try:
            self.store: StateStore = open_store(spec)
        except StoreError as exc:
            # A store that cannot be opened (locked, unwritable, someone else's file) must
            # not stop the job: carry on with what this process learns.
            log.warning(
                "store could not be opened (%s: %s); using an in-memory store for this run",
                type(exc).__name__,
                exc,
            )
            self.store = MemoryStore()
            self._owns_store = True

    def _setup(self) -> None:
        self._open_store()
        self._hosts: Dict[str, _Host] = {}
        self._host_keys: Dict[str, str] = {}
        self._hosts_lock = threading.Lock()
        self._rng = random.Random(self._seed)
        self._worker = uuid.uuid4().hex[:12]
        self._store_down_since: Optional[float] = None
        self._closed = False
        _live_adapters.add(self)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[misc]
        self._seed = None
        self._setup()

    def __repr__(self) -> str:
        return f"RetryAfterAdapter(policy={self.policy!r}, store={self.store!r})"

    # -- hosts and the store --------------------------------------------------------------

    def _host_key(self, url: str) -> str:
        """:func:`host_key` of ``url``, cached by scheme and authority (the hot path)."""
        authority = url.split("/", 3)[:3]
        cache_key = "/".join(authority)
        key = self._host_keys.get(cache_key)
        if key is None:
            if len(self._host_keys) > 4096:
                self._host_keys.clear()
            key = self._host_keys[cache_key] = host_key(url)
        return key

    def _host(self, key: str) -> _Host:
        with self._hosts_lock:
            host = self._hosts.get(key)
            if host is None:
                stored = self._store_call("get", key)
                state = stored if isinstance(stored, HostState) else HostState(key)
                tracker = HostTracker(state, self.policy, self._rng, self._worker)
                host = _Host(tracker, self.policy.max_concurrency)
                self._hosts[key] = host
            return host

    def _store_call(self, name: str, *args: Any) -> Any:
        """Call the store; on failure, warn once and carry on with in-process knowledge."""
        try:
            result = getattr(self.store, name)(*args)
        except (StoreError, OSError, ValueError) as exc:
            if self._store_down_since is None:
                self._store_down_since = self.clock.monotonic()
                log.warning(
                    "store %s unavailable (%s); carrying on with what this process knows",
                    type(self.store).__name__,
                    type(exc).__name__,
                )
            return None
        if self._store_down_since is not None:
            self._store_down_since = None
            log.warning("store %s is reachable again", type(self.store).__name__)
        return result

    def _sync(self, host: _Host, *, force: bool = False) -> None:
        """Write what changed and read what other workers wrote (under ``host.lock``)."""
        tracker = host.tracker
        mono = self.clock.monotonic()
        shared = bool(getattr(self.store, "shared", False))
        due = mono - host.last_sync >= self.policy.sync_interval
        if not (force or (due and (shared or tracker.dirty))):
            return
        host.last_sync = mono
        wall = self.clock.time()
        if shared:
            tracker.heartbeat(wall)
        if tracker.dirty:
            local = tracker.state
            stored = self._store_call("update", tracker.host, local.merge)
            if isinstance(stored, HostState):
                tracker.dirty = False
                self._adopt(tracker, stored, wall)
        elif shared:
            stored = self._store_call("get", tracker.host)
            if isinstance(stored, HostState) and stored is not tracker.state:
                self._adopt(tracker, tracker.state.merge(stored), wall)

    def _adopt(self, tracker: HostTracker, merged: HostState, wall: float) -> None:
        if merged.observations != tracker.state.observations:
            dirty = tracker.dirty
            decision = tracker.rejudge(merged, wall)
            tracker.dirty = dirty or decision is not None
            if decision is not None:
                self._emit(decision)
        else:
            tracker.state = merged

    def flush(self) -> None:
        """Write every host's unsaved changes to the store now."""
        with self._hosts_lock:
            hosts = list(self._hosts.values())
        for host in hosts:
            with host.lock:
                if host.tracker.dirty:
                    self._sync(host, force=True)

    def close(self) -> None:
        """Flush to the store, close it (when this adapter opened it), then close the pools."""
        if not self._closed:
            self._closed = True
            self.flush()
            if self._owns_store:
                try:
                    self.store.close()
                except (StoreError, OSError) as exc:  # pragma: no cover - defensive
                    log.warning("closing store failed: %s", type(exc).__name__)
            _live_adapters.discard(self)
        super().close()

    # -- decisions --------------------------------------------------------------------------

    def _emit(self, decision: Decision) -> None:
        level = _LEVELS.get(decision.event, logging.INFO)
        if decision.event == "category" and decision.reason.startswith("category unknown "):
            level = logging.INFO
        if log.isEnabledFor(level):
            if decision.event in ("sleep", "wait"):
                log.log(
                    level,
                    "%s: waiting %.1f s before attempt %d: %s",
                    decision.host,
                    decision.wait,
                    decision.attempt + 1,
                    decision.reason,
                )
            else:
                log.log(level, "%s: %s: %s", decision.host, decision.event, decision.reason)
        if self.on_decision is not None:
            try:
                self.on_decision(decision)
            except Exception:
                log.exception("on_decision hook raised; ignored")

    # -- sending ------------------------------------------------------------------------------

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: TimeoutArg = None,
        verify: Union[bool, str] = True,
        cert: Union[bytes, str, Tuple[Union[bytes, str], Union[bytes, str]], None] = None,
        proxies: Optional[Mapping[str, str]] = None,
    ) -> requests.Response:
        """Send ``request``, retrying 429/503 (and connection failures) within the policy.

        Raises:
            HostHeld: the host is held; nothing went on the wire for this call's last attempt.
            RetryLimitExceeded: ``max_attempts`` requests were refused.
            RetryDeadlineExceeded: the wait needed would pass the deadline (raised before
                sleeping).
        """
        policy, clock = self.policy, self.clock
        key = self._host_key(request.url or "")
        host = self._host(key)
        deadline = clock.monotonic() + policy.deadline
        replayable, why_not = _replayable(request)
        body_pos = _body_position(request)
        response: Optional[requests.Response] = None
        attempt = 0
        connect_failures = 0
        failure: Optional[float] = None
        while True:
            self._await_turn(host, deadline, attempt, response, request)
            host.slots.acquire()
            try:
                # Waiting for a slot may have outlasted another thread's rejection: look again.
                with host.lock:
                    if host.tracker.gate(clock.monotonic(), clock.time()) > 0:
                        continue
                attempt += 1
                if attempt > 1 and body_pos is not None:
                    request.body.seek(body_pos)  # type: ignore[union-attr]
                remaining = deadline - clock.monotonic()
                try:
                    response = super().send(
                        request,
                        stream=stream,
                        timeout=_cap_timeout(timeout, remaining),  # type: ignore[arg-type]
                        verify=verify,
                        cert=cert,
                        proxies=proxies,
                    )
                except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                    failure = self._connection_failure(
                        exc, key, attempt, connect_failures, deadline, replayable, why_not
                    )
                    connect_failures += 1
                    response = None
                else:
                    failure = None
                    # Record the outcome before another thread may take this slot.
                    if response.status_code not in REJECTIONS:
                        self._on_answer(host, response, attempt)
                        return response
                    if not self._on_rejection(
                        host, response, attempt, deadline, replayable, why_not, request
                    ):
                        return response
                    _drain(response)
            finally:
                host.slots.release()
            if failure is not None:
                clock.sleep(failure)

    def _connection_failure(
        self,
        exc: Exception,
        key: str,
        attempt: int,
        failures: int,
        deadline: float,
        replayable: bool,
        why_not: str,
    ) -> float:
        """Decide on a connection or read error: return the wait before retrying, or re-raise."""
        policy, clock = self.policy, self.clock
        never_sent = never_reached_server(exc)
        where = "before reaching the server" if never_sent else "reading the answer"
        give_up = ""
        if not (never_sent or replayable):
            give_up = f"not retried: {why_not}, and the request may have reached the server"
        elif attempt >= policy.max_attempts:
            give_up = f"all {policy.max_attempts} attempts used"
        elif failures >= policy.connect_retries:
            give_up = f"all {policy.connect_retries} connection retries used"
        wait = max(
            0.5,
            self._rng.uniform(
                0.0, min(policy.backoff_cap, policy.backoff_base * 2.0 ** (failures + 1))
            ),
        )
        if not give_up and wait > deadline - clock.monotonic():
            give_up = f"the backoff of {wait:.1f} s is longer than what is left of the deadline"
        if give_up:
            self._emit(
                Decision(
                    "give_up", key, 0.0, f"{type(exc).__name__} {where}; {give_up}", attempt=attempt
                )
            )
            raise exc
        self._emit(
            Decision(
                "sleep", key, wait, f"{type(exc).__name__} {where}; own backoff", attempt=attempt
            )
        )
        return wait

    def _on_answer(self, host: _Host, response: requests.Response, attempt: int) -> None:
        """Record a response that is not a rejection, and log an ignored header."""
        tracker = host.tracker
        status = response.status_code
        headers = response.headers
        decision: Optional[Decision] = None
        if 200 <= status < 300:
            clock = self.clock
            with host.lock:
                mono, wall = clock.monotonic(), clock.time()
                closing = tracker.episode is not None
                decision = tracker.on_success(mono, wall)
                if _has_any(headers, _STATED_LIMIT_FIELDS):
                    tracker.on_stated_limit(parse_rate_limit(headers, now=wall), mono, wall)
                if closing:  # an episode ended: worth writing now; the rest waits its turn
                    self._sync(host, force=True)
            if decision is not None:
                self._emit(decision)
        elif status in AUTH_STATUSES:
            self._emit(
                Decision(
                    "refuse",
                    tracker.host,
                    reason=f"{status} is an authentication answer, never retried",
                    status=status,
                    attempt=attempt,
                )
            )
        if _has_any(headers, ("retry-after",)):
            decision = Decision(
                "ignore",
                tracker.host,
                reason=f"Retry-After on a {status} ignored: only 429 and 503 carry a wait",
                status=status,
                attempt=attempt,
            )
            if not host.warned_ignore:
                host.warned_ignore = True
                log.info("%s: %s (logged once per host)", decision.host, decision.reason)
            self._emit(decision)

    def _on_rejection(
        self,
        host: _Host,
        response: requests.Response,
        attempt: int,
        deadline: float,
        replayable: bool,
        why_not: str,
        request: requests.PreparedRequest,
    ) -> bool:
        """Decide what a 429/503 means: ``True`` to retry, ``False`` to return it; or raise."""
        clock, policy, tracker = self.clock, self.policy, host.tracker
        with host.lock:
            mono, wall = clock.monotonic(), clock.time()
            parsed = parse_retry_after(response.headers.get("Retry-After"), now=wall)
            info = parse_rate_limit(response.headers, now=wall)
            decision = tracker.on_rejection(response.status_code, parsed, info, mono, wall, attempt)
            self._sync(host, force=True)
        self._emit(decision)
        key = tracker.host
        if not replayable:
            self._emit(
                Decision(
                    "refuse",
                    key,
                    decision.wait,
                    f"not retried: {why_not}; the {response.status_code} goes back to the caller",
                    status=response.status_code,
                    attempt=attempt,
                )
            )
            return False
        if decision.event == "hold":
            _drain(response)
            raise _held(key, decision.until, decision.reason, response, request)
        give_up = ""
        if attempt >= policy.max_attempts:
            give_up = f"all {policy.max_attempts} attempts used"
            error: RetryAfterError = RetryLimitExceeded(
                f"{key}: {give_up}; last status {response.status_code}",
                host=key,
                response=response,
                request=request,
            )
        else:
            remaining = deadline - clock.monotonic()
            if decision.wait <= remaining:
                return True
            give_up = f"the wait of {decision.wait:.1f} s is longer than the {remaining:.1f} s left"
            error = RetryDeadlineExceeded(
                f"{key}: {give_up} of the call's deadline",
                host=key,
                delay=decision.wait,
                remaining=max(0.0, remaining),
                response=response,
                request=request,
            )
        self._emit(
            Decision(
                "give_up",
                key,
                decision.wait,
                give_up,
                status=response.status_code,
                attempt=attempt,
            )
        )
        _drain(response)
        raise error

    def _await_turn(
        self,
        host: _Host,
        deadline: float,
        attempt: int,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> None:
        """Wait for the host's shared wait and pacing slot; raise if held or out of time."""
        clock, tracker, policy = self.clock, host.tracker, self.policy
        while True:
            with host.lock:
                self._sync(host)
                mono, wall = clock.monotonic(), clock.time()
                if tracker.held(wall):
                    state = tracker.state
                    self._emit(
                        Decision(
                            "hold",
                            tracker.host,
                            reason=state.hold_reason,
                            attempt=attempt,
                            until=state.held_until,
                        )
                    )
                    raise _held(
                        tracker.host, state.held_until, state.hold_reason, response, request
                    )
                wait = tracker.gate(mono, wall)
                paced = wait <= 0
                if paced:
                    wait = tracker.reserve(mono, wall)
                    if wait <= 0:
                        return
                remaining = deadline - mono
                error: Optional[RetryAfterError] = None
                if paced and wait > policy.max_sleep:
                    tracker.release(mono)
                    reason = (
                        f"this adapter's share of the learned limit is used up; the next "
                        f"window starts in {wait:.0f} s, longer than max_sleep"
                    )
                    error = _held(tracker.host, wall + wait, reason, response, request)
                    event = "hold"
                elif wait > remaining:
                    if paced:
                        tracker.release(mono)
                    what = "pacing" if paced else "the host's wait"
                    reason = (
                        f"{what} needs {wait:.1f} s, more than the {max(0.0, remaining):.1f} s left"
                    )
                    error = RetryDeadlineExceeded(
                        f"{tracker.host}: {reason} of the call's deadline",
                        host=tracker.host,
                        delay=wait,
                        remaining=max(0.0, remaining),
                        response=response,
                        request=request,
                    )
                    event = "give_up"
            if error is not None:
                self._emit(
                    Decision(
                        event,
                        tracker.host,
                        wait,
                        reason,
                        attempt=attempt,
                        until=wall + wait if event == "hold" else 0.0,
                    )
                )
                raise error
            reason = (
                "pacing below the host's learned limit"
                if paced
                else "the host's wait after a rejection"
            )
            self._emit(Decision("wait", tracker.host, wait, reason, attempt=attempt))
            clock.sleep(wait)
            if paced:
                with host.lock:
                    mono, wall = clock.monotonic(), clock.time()
                    if tracker.gate(mono, wall) <= 0 and not tracker.held(wall):
                        return


def _held(
    key: str,
    until: float,
    reason: str,
    response: Optional[requests.Response],
    request: requests.PreparedRequest,
) -> HostHeld:
    return HostHeld(
        f"{key} is held until epoch {until:.0f}: {reason}",
        host=key,
        until=until,
        reason=reason,
        response=response,
        request=request,
    )


_STATED_LIMIT_FIELDS = (
    "ratelimit-policy",
    "ratelimit",
    "ratelimit-limit",
    "ratelimit-remaining",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
)


def _has_any(headers: Mapping[str, str], lower_names: Tuple[str, ...]) -> bool:
    """Whether ``headers`` has any of ``lower_names`` (fast for requests' CaseInsensitiveDict,
    whose ``_store`` is keyed by lowercase name)."""
    store = getattr(headers, "_store", None)
    if isinstance(store, dict):
        return any(name in store for name in lower_names)
    lowered = {name.lower() for name in headers}
    return any(name in lowered for name in lower_names)


def _replayable(request: requests.PreparedRequest) -> Tuple[bool, str]:
    method = (request.method or "GET").upper()
    if method in KEYED_METHODS:
        if "Idempotency-Key" not in request.headers:
            return False, f"{method} without an Idempotency-Key header"
    elif method not in IDEMPOTENT_METHODS:
        return False, f"{method} is not idempotent"
    body = request.body
    if body is None or isinstance(body, (bytes, str)):
        return True, ""
    if _body_position(request) is None:
        return False, "its body is a stream that cannot be sent again"
    return True, ""


def _body_position(request: requests.PreparedRequest) -> Optional[int]:
    body = request.body
    if body is None or isinstance(body, (bytes, str)):
        return None
    seek, tell = getattr(body, "seek", None), getattr(body, "tell", None)
    if seek is None or tell is None:
        return None
    try:
        if hasattr(body, "seekable") and not body.seekable():
            return None
        position = tell()
        return position if isinstance(position, int) else None
    except (OSError, ValueError):
        return None


def _cap_timeout(timeout: TimeoutArg, remaining: float) -> TimeoutArg:
    remaining = max(remaining, 0.001)
    if timeout is None:
        return remaining
    if isinstance(timeout, tuple) and len(timeout) == 2:
        connect, read = timeout
        return (
            remaining if connect is None else min(connect, remaining),
            remaining if read is None else min(read, remaining),
        )
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return min(float(timeout), remaining)
    if isinstance(timeout, Timeout):
        connect, read = timeout.connect_timeout, timeout.read_timeout
        return Timeout(
            connect=min(connect, remaining) if isinstance(connect, (int, float)) else remaining,
            read=min(read, remaining) if isinstance(read, (int, float)) else remaining,
        )
    return timeout


#: A refused response's body is read (so the connection can be reused) up to this size.
DRAIN_LIMIT = 1 << 20


def _drain(response: requests.Response) -> None:
    """Release a response that will not be returned: read a small body so the connection can
    be reused; close the connection rather than read a large one."""
    length = response.headers.get("Content-Length", "")
    if not (length.isdigit() and int(length) > DRAIN_LIMIT):
        with contextlib.suppress(requests.exceptions.RequestException, OSError, RuntimeError):
            response.content  # noqa: B018 - reading the body releases the connection
    response.close()


def mount(
    session: requests.Session,
    adapter: Optional[RetryAfterAdapter] = None,
    **kwargs: Any,
) -> RetryAfterAdapter:
    """Mount one :class:`RetryAfterAdapter` on ``session`` for ``http://`` and ``https://``.

    ``kwargs`` go to the adapter's constructor when ``adapter`` is not given. Returns the adapter.
    """
    if adapter is None:
        adapter = RetryAfterAdapter(**kwargs)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return adapter
