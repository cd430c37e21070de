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
from collections import OrderedDict
from dataclasses import fields
from typing import (
    AbstractSet,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import requests
from requests.adapters import HTTPAdapter

from ._compat import (
    connection_retry,
    failure_kind,
)
from ._traces import TRACE_ATTRIBUTE, HostSummary, RetryTrace, Summaries, trace, trace_of
from ._transport import (
    DRAIN_SECONDS,
    TimeoutArg,
    body_position,
    cap_timeout,
    read_timeout,
    release,
    replayable,
)
from .calls import AUTH_STATUSES, CallState, Turn
from .clock import Clock, SystemClock
from .decisions import Code, Decision, Event
from .engine import HostTracker
from .errors import (
    ConfigurationError,
    HostHeld,
    RetryAfterError,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
    StoreError,
    utc_iso,
)
from .parsing import parse_rate_limit, parse_retry_after
from .policy import ENV_PREFIX, Policy, resolve
from .state import HostState, host_key
from .stores import MemoryStore, StateStore, open_store

__all__ = ["HostSummary", "RetryAfterAdapter", "RetryTrace", "mount", "trace_of"]

log = logging.getLogger(__name__)

#: Statuses that carry a meaningful Retry-After and are retried.
REJECTIONS = frozenset({429, 503})

DecisionHook = Callable[[Decision], None]

_LEVELS = {
    Event.SLEEP: logging.INFO,
    Event.HOLD: logging.WARNING,
    Event.REFUSE: logging.INFO,
    Event.GIVE_UP: logging.WARNING,
    Event.WAIT: logging.DEBUG,
    Event.IGNORE: logging.DEBUG,
    Event.CATEGORY: logging.WARNING,
}

#: :class:`Policy` fields, which the adapter also takes as keyword arguments.
_POLICY_FIELDS = frozenset(f.name for f in fields(Policy))


_live_adapters: weakref.WeakSet[RetryAfterAdapter] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    for adapter in list(_live_adapters):
        adapter.flush()


class _Slots:
    """A host's requests in flight, at most ``size`` at once: a counting semaphore whose
    uncontended acquire and release each take one C lock (``threading.BoundedSemaphore``
    goes through a ``Condition`` in Python both ways, a few microseconds per request)."""

    __slots__ = ("_free", "_lock", "_ready", "_waiting")

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting = 0
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)

    def acquire(self) -> bool:
        """Take a slot; return whether this had to wait for one."""
        waited = False
        with self._lock:
            while self._free <= 0:
                waited = True
                self._waiting += 1
                try:
                    self._ready.wait()
                finally:
                    self._waiting -= 1
            self._free -= 1
        return waited

    def release(self) -> None:
        with self._lock:
            self._free += 1
            if self._waiting:
                self._ready.notify()


class _Host:
    """An adapter's runtime for one host: the tracker plus its lock and concurrency cap."""

    __slots__ = (
        "floor_until",
        "internal_errors",
        "last_sync",
        "last_used",
        "lock",
        "sent_once",
        "slots",
        "tracker",
        "users",
        "warned_ignore",
    )

    def __init__(self, tracker: HostTracker, max_concurrency: int) -> None:
        self.tracker = tracker
        self.lock = threading.RLock()
        self.slots = _Slots(max_concurrency)
        self.last_sync = float("-inf")
        self.warned_ignore = False
        #: Calls using this host now (counted under the adapter's hosts lock).
        self.users = 0
        #: Monotonic time the last call using this host ended.
        self.last_used = float("-inf")
        self.internal_errors = 0
        #: Monotonic time before which no request to the host goes by the fallback path
        #: (after an internal error): see RetryAfterAdapter._floor_after.
        self.floor_until = float("-inf")
        #: The trace of a call that sent one request and decided nothing (most calls).
        self.sent_once = RetryTrace(tracker.host, 1, 0, 0.0, ())


#: Hosts an adapter keeps in memory before it drops idle healthy ones (least recently used
#: first), down to :data:`HOSTS_LOW_WATER`. A host that is held, waiting, in an episode, in
#: use, paced within its window, or has unsaved changes the store would not take, is kept.
MAX_HOSTS = 1024
HOSTS_LOW_WATER = 896
#: After a store call fails, no store call for this many seconds; each further failure
#: doubles it, up to :data:`STORE_RETRY_MAX`.
STORE_RETRY_FIRST = 30.0
STORE_RETRY_MAX = 300.0
_STORE_WRITES = frozenset({"update", "set", "delete"})


class RetryAfterAdapter(HTTPAdapter):
    """A transport adapter that retries 429/503 itself, using ``Retry-After`` only as far as
    each host has earned, pacing each host below its learned limit.

    Mount it like any adapter::

        session = requests.Session()
        adapter = RetryAfterAdapter()
        session.mount("https://", adapter)
        session.mount("http://", adapter)

    Args:
        policy: the limits to keep, as they are: a :class:`Policy` is complete, and the
            environment's ``REQUESTS_RETRYAFTER_<FIELD>`` variables are not read for it (a
            :class:`~requests_retryafter.RetryAfterWarning` names those set). Without one, the
            policy is :meth:`Policy.from_env` of the keyword arguments and ``environ``.
        store: where per-host knowledge is kept: a spec string (``memory://``,
            ``json://PATH``, ``sqlite://PATH``, ...) or a store object. Defaults to
            ``REQUESTS_RETRYAFTER_STORE`` or ``memory://``. A store given as an object is
            not closed by :meth:`close`; one opened from a spec is.
        clock: the clock for every sleep, interval and date (default :class:`SystemClock`).
        on_decision: called with every :class:`~requests_retryafter.Decision` (sleeps, holds,
            refusals, category changes), for progress displays and metrics.
        environ: the environment to read settings from (default :data:`os.environ`).
        seed: seed for the jitter's random source (for reproducible tests).
        **kwargs: any :class:`Policy` field (``RetryAfterAdapter(max_attempts=3)``): it is
            explicit, so it wins over the environment and over ``policy``'s field. Then
            :class:`~requests.adapters.HTTPAdapter`'s own arguments
            (``pool_connections``, ``pool_maxsize``, ``pool_block``, ``max_retries``).
            A ``Retry`` given as ``max_retries`` is handed to urllib3 as it is (its backoff,
            counts, methods and statuses, 413 included), except that 429 and 503 are taken
            out of its ``status_forcelist`` (this adapter retries those) and it never sleeps
            on ``Retry-After``.

    Every response the adapter returns carries what happened to it as
    ``response.retry_after``, a :class:`RetryTrace` (attempts, refusals, seconds waited, the
    decisions of this call); :func:`trace_of` reads it with its type. The ``response`` of a
    :class:`~requests_retryafter.RetryAfterError` carries it too. :meth:`summary` sums the
    calls up per host.

    Only :mod:`requests` exceptions leave :meth:`send`. A failure of this adapter's own logic
    (a bug, a broken store or hook) is logged at ERROR with the host, and the request goes
    on as a plain :class:`~requests.adapters.HTTPAdapter` would send it. A store that fails
    is skipped for a while (30 s, doubling up to 5 min) and then tried again; it is logged
    once when it fails and once when it is reachable again.

    Pickling keeps the policy and the store's spec. A store given as an object is pickled as
    its spec when it has one (a string ``spec`` attribute, or a file store's scheme and
    path); any other store object (a :class:`MemoryStore`, a Redis store, your own) is not
    pickled, and the unpickled adapter starts with a new in-memory store.

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
        explicit = {name: kwargs.pop(name) for name in list(kwargs) if name in _POLICY_FIELDS}
        self.policy = resolve(policy, env, explicit)
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
        except (StoreError, OSError) as exc:
            # A store that cannot be opened (locked, unwritable, someone else's file) must
            # not stop the job: carry on with what this process learns. The error's text
            # names the file and the OS error (a spec is never logged: it may hold a password).
            log.warning(
                "store could not be opened (%s: %s); using an in-memory store for this run",
                type(exc).__name__,
                exc,
            )
            self.store = MemoryStore()
            self._owns_store = True

    def _setup(self) -> None:
        self._open_store()
        self._hosts: OrderedDict[str, _Host] = OrderedDict()
        self._host_keys: Dict[str, str] = {}
        self._hosts_lock = threading.Lock()
        self._rng = random.Random(self._seed)
        self._worker = uuid.uuid4().hex[:12]
        # The store's circuit breaker: when it went down, when to try it again, the pause.
        self._store_lock = threading.Lock()
        self._store_down_since: Optional[float] = None
        self._store_retry_at = float("-inf")
        self._store_pause = 0.0
        self._store_write_failed = False
        self._closed = False
        self._calls = threading.local()
        self._summaries = Summaries()
        _live_adapters.add(self)

    def __getstate__(self) -> Dict[str, Any]:
        state: Dict[str, Any] = super().__getstate__()  # type: ignore[misc]
        state["_store_spec"] = _store_spec_of(self._store_spec)
        return state

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
        """The runtime of host ``key``, counted as in use until :meth:`_done_with`."""
        with self._hosts_lock:
            host = self._hosts.get(key)
            if host is not None:
                self._hosts.move_to_end(key)
                host.users += 1
                return host
        # Read the store outside the hosts lock: a slow store must not hold up other hosts.
        fresh = self._new_host(key)
        with self._hosts_lock:
            host = self._hosts.setdefault(key, fresh)
            host.users += 1
            crowded = len(self._hosts) > MAX_HOSTS
        if crowded:
            self._evict()
        return host

    def _new_host(self, key: str) -> _Host:
        state = self._checked(key, self._store_call("get", key)) or HostState(key)
        try:
            tracker = HostTracker(state, self.policy, self._rng, self._worker)
        except Exception as exc:
            log.warning(
                "%s: stored state unusable (%s: %s); starting fresh", key, type(exc).__name__, exc
            )
            tracker = HostTracker(HostState(key), self.policy, self._rng, self._worker)
        return _Host(tracker, self.policy.max_concurrency)

    def _checked(self, key: str, stored: Any) -> Optional[HostState]:
        """A state the store handed over, if it is one and every value is in range; a damaged
        one is dropped with a warning (the host starts fresh, and the next write replaces it)."""
        if not isinstance(stored, HostState):
            return None
        try:
            return stored.checked()
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("%s: stored state dropped, starting fresh: %s", key, exc)
            return None

    def _done_with(self, host: _Host) -> None:
        with self._hosts_lock:
            host.users -= 1
            host.last_used = self.clock.monotonic()

    def _idle(self, host: _Host, mono: float, wall: float) -> bool:
        """Whether ``host`` may leave memory: unused, healthy, nothing pending but writes."""
        tracker = host.tracker
        if host.users or tracker.episode is not None:
            return False
        if tracker.held(wall, mono) or tracker.gate(mono, wall) > 0:
            return False
        limit = tracker.state.limit
        if limit is not None and self.policy.pace:
            # Its pacing counts live only here: keep it until a whole window has passed.
            window = limit.window or (1.0 / limit.rate if limit.rate > 0 else 60.0)
            if mono - host.last_used <= min(window, self.policy.max_hold):
                return False
        return True

    def _evict(self) -> None:
        """Drop idle hosts, least recently used first, down to :data:`HOSTS_LOW_WATER`.

        A host with unsaved changes is written to the store first, and kept if that fails.
        """
        clock = self.clock
        with self._hosts_lock:
            excess = len(self._hosts) - HOSTS_LOW_WATER
            if excess <= 0:
                return
            # Look at a bounded number of the oldest hosts (busy ones are skipped).
            oldest: List[Tuple[str, _Host]] = []
            for key, host in self._hosts.items():
                if len(oldest) >= excess + 64:
                    break
                oldest.append((key, host))
        evicted = 0
        for key, host in oldest:
            if evicted >= excess:
                break
            with host.lock:
                mono, wall = clock.monotonic(), clock.time()
                if not self._idle(host, mono, wall):
                    continue
                if host.tracker.dirty:
                    self._sync(host, force=True)
                    if host.tracker.dirty:
                        continue  # the store did not take it: keep it in memory
                with self._hosts_lock:
                    if self._hosts.get(key) is host and not host.users:
                        del self._hosts[key]
                        evicted += 1
        if evicted:
            log.debug("%d idle hosts dropped from memory", evicted)

    def _store_call(self, name: str, *args: Any) -> Any:
        """Call the store; on failure carry on with in-process knowledge.

        A failed store is skipped (``None``) until its pause is over: 30 s after a failure,
        doubling with each failure up to 5 min. One warning when it fails (naming the store
        and the error), one when it is reachable again.
        """
        store = self.store
        if self._store_down_since is not None and self.clock.monotonic() < self._store_retry_at:
            return None
        try:
            result = getattr(store, name)(*args)
        except Exception as exc:  # any failure of a store is a store failure
            with self._store_lock:
                mono = self.clock.monotonic()
                first = self._store_down_since is None
                if name in _STORE_WRITES:
                    self._store_write_failed = True
                if first:
                    self._store_down_since = mono
                    self._store_pause = STORE_RETRY_FIRST
                else:
                    self._store_pause = min(STORE_RETRY_MAX, 2 * self._store_pause)
                self._store_retry_at = mono + self._store_pause
                pause = self._store_pause
            if first:
                log.warning(
                    "store %r unavailable (%s: %s); carrying on with what this process "
                    "knows, next try in %.0f s",
                    store,
                    type(exc).__name__,
                    exc,
                    pause,
                )
            else:
                log.debug("store %r still unavailable (%s)", store, type(exc).__name__)
            return None
        if self._store_down_since is not None and (
            name in _STORE_WRITES or not self._store_write_failed
        ):  # a read that works says nothing of writes that failed (a full disk)
            with self._store_lock:
                since, self._store_down_since = self._store_down_since, None
                self._store_pause = 0.0
                self._store_write_failed = False
            if since is not None:
                log.warning(
                    "store %r is reachable again after %.0f s",
                    store,
                    self.clock.monotonic() - since,
                )
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
        beat = shared and tracker.heartbeat(wall)
        if tracker.dirty:
            self._write(tracker, wall)
        elif shared:
            self._read_shared(host, wall)
            if not beat and tracker.heartbeat(wall):
                # The store says the host refused another worker, and makes this one wait:
                # this worker is counted at once, so that the returns from that wait are
                # spread between all the workers waiting (counted only at its own first
                # refusal, it came back with the others into a bucket that lets one through).
                self._write(tracker, wall)
        if shared:
            tracker.workers.count(wall)  # with the other workers' heartbeats merged in

    def _write(self, tracker: HostTracker, wall: float) -> None:
        """Write the tracker's state, merged with the store's entry, and adopt the result
        (under the host's lock)."""
        local = tracker.state
        name = tracker.host

        def merged(current: Optional[HostState]) -> HostState:
            # A damaged entry in the store is replaced, never merged into what we write.
            return local.merge(self._checked(name, current))

        stored = self._checked(name, self._store_call("update", name, merged))
        if isinstance(stored, HostState):
            tracker.dirty = False
            self._adopt(tracker, stored, wall)

    def _read_shared(self, host: _Host, wall: float) -> None:
        """Read what other workers wrote of the host and merge it in (under ``host.lock``)."""
        tracker = host.tracker
        stored = self._checked(tracker.host, self._store_call("get", tracker.host))
        if stored is not tracker.state:
            self._merge_in(tracker, stored, wall)

    def _merge_in(self, tracker: HostTracker, stored: Any, wall: float) -> bool:
        """Merge ``stored`` (what a store call returned) into the tracker's state; ``False``
        when it is no state (the store failed, or the entry was refused)."""
        if not isinstance(stored, HostState):
            return False
        self._adopt(tracker, tracker.state.merge(stored), wall)
        return True

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
            self._store_retry_at = float("-inf")  # one more try for what is unsaved
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
        if decision.code == Code.FIRST_JUDGED:
            level = logging.INFO
        call = self._call()
        if call is not None:
            call.decisions.append(decision)
        if log.isEnabledFor(level):
            if decision.event in (Event.SLEEP, Event.WAIT):
                log.log(
                    level,
                    "%s: waiting %.1f s before attempt %d: %s",
                    decision.host,
                    decision.wait,
                    decision.attempt + 1,
                    decision.reason,
                )
            else:
                log.log(level, "%s: %s: %s", decision.host, decision.event.value, decision.reason)
        if self.on_decision is not None:
            try:
                self.on_decision(decision)
            except Exception:
                log.exception("on_decision hook raised; ignored")

    def _call(self) -> Optional[CallState]:
        """The call this thread is in, if any."""
        stack: Optional[List[CallState]] = getattr(self._calls, "stack", None)
        return stack[-1] if stack else None

    def _sleep(self, call: CallState, seconds: float) -> None:
        """Wait ``seconds`` on the adapter's clock, counted as one wait of ``call``."""
        call.slept(seconds)
        self.clock.sleep(seconds)

    def summary(self) -> Dict[str, HostSummary]:
        """What this adapter did so far, per host key (a copy): calls, requests, refusals,
        waits and the seconds they took, holds and give-ups.

        .. versionadded:: 0.1.0
        """
        return self._summaries.summary()

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
        """Send ``request``, retrying 429/503 (and transient connection failures) within the
        policy.

        Only :mod:`requests` exceptions are raised, as by a plain ``HTTPAdapter``; TLS, proxy,
        URL and header errors reach the caller unchanged, never retried.

        Raises:
            HostHeld: the host is held; nothing went on the wire for this call's last attempt.
            RetryLimitExceeded: ``max_attempts`` requests were refused.
            RetryDeadlineExceeded: the wait needed would pass the deadline (raised before
                sleeping).
        """
        kw: Dict[str, Any] = {"stream": stream, "verify": verify, "cert": cert, "proxies": proxies}
        try:
            key = self._host_key(request.url or "")
            host = self._host(key)
        except Exception as exc:
            log.error(
                "internal error before sending (%s: %s); sent as a plain HTTPAdapter would",
                type(exc).__name__,
                exc,
                exc_info=True,
            )
            return super().send(request, timeout=timeout, **kw)  # type: ignore[arg-type]
        call = CallState(host.tracker.host, self.policy, self.clock.monotonic(), rng=self._rng)
        stack: Optional[List[CallState]] = getattr(self._calls, "stack", None)
        if stack is None:
            stack = self._calls.stack = []
        stack.append(call)
        try:
            response = self._send(host, request, timeout, kw, call)
        except RetryAfterError as exc:
            if exc.response is not None:
                setattr(exc.response, TRACE_ATTRIBUTE, trace(call, host.sent_once))
            raise
        else:
            setattr(response, TRACE_ATTRIBUTE, trace(call, host.sent_once))
            return response
        finally:
            stack.pop()
            self._done_with(host)
            try:
                self._summaries.count(call)
            except Exception:  # counting must never break a call
                log.debug(
                    "%s: the call was not counted in summary()", host.tracker.host, exc_info=True
                )

    def _send(
        self,
        host: _Host,
        request: requests.PreparedRequest,
        timeout: TimeoutArg,
        kw: Dict[str, Any],
        call: CallState,
    ) -> requests.Response:
        """Send and sleep as ``call`` and the host's tracker decide (this does the I/O only)."""
        clock = self.clock
        response: Optional[requests.Response] = None
        #: A response in hand that was neither drained nor returned (for the fallback).
        pending: Optional[requests.Response] = None
        #: The transport is running: what it raises goes to the caller unchanged.
        sending = False
        sent = timeout
        phase = "preparing"
        body_pos: Optional[int] = None
        try:
            call.replayable, call.why_not = replayable(request)
            body_pos = body_position(request)
            while True:
                phase = "waiting for the host's turn"
                self._await_turn(host, response, request, call)
                failure: Optional[Decision] = None
                verdict: Optional[Decision] = None
                waited = host.slots.acquire()
                try:
                    # Waiting for a slot may have outlasted another thread's rejection: look
                    # again (a slot free at once came too soon after the turn for that).
                    if waited:
                        with host.lock:
                            if host.tracker.gate(clock.monotonic(), clock.time()) > 0:
                                continue
                    began = clock.monotonic()
                    call.sent(began)
                    if call.attempts > 1 and body_pos is not None:
                        request.body.seek(body_pos)  # type: ignore[union-attr]
                    sent = cap_timeout(timeout, call.deadline - began)
                    sending = True
                    try:
                        response = super().send(request, timeout=sent, **kw)  # type: ignore[arg-type]
                    except (
                        requests.exceptions.ConnectionError,
                        requests.exceptions.Timeout,
                    ) as exc:
                        sending = False
                        phase = "deciding on a connection error"
                        pending = response = None
                        failure = call.connection_failed(
                            failure_kind(exc), type(exc).__name__, clock.monotonic()
                        )
                        self._emit(failure)
                        if failure.event == Event.GIVE_UP:
                            raise
                    else:
                        sending = False
                        pending = response
                        # Record the outcome before another thread may take this slot.
                        if response.status_code not in REJECTIONS:
                            phase = "recording an answer"
                            self._on_answer(host, response, call)
                            return response
                        phase = "deciding on a rejection"
                        verdict = self._on_rejection(host, response, call)
                        if verdict.event == Event.REFUSE:
                            return response
                finally:
                    host.slots.release()
                if verdict is not None:
                    # Outside the slot and the host's lock: no call's body-reading holds up
                    # another.
                    phase = "releasing a rejection"
                    assert response is not None
                    pending = None
                    self._drain(response, call.deadline, sent)
                    if verdict.event != Event.SLEEP:
                        raise self._error(verdict, call, response, request)
                if failure is not None:
                    phase = "backing off"
                    self._sleep(call, failure.wait)
        except requests.exceptions.RequestException:
            raise
        except Exception as exc:
            if sending:
                raise  # the transport's own error: as a plain adapter gives it
            self._internal_error(host, phase, exc)
            answered = pending if pending is not None else response
            if answered is not None and answered.status_code in REJECTIONS:
                # Nothing went since this rejection: it is what a plain adapter returns, and
                # sending again now would skip the wait after it (the floor at least, which
                # the host's next request now waits).
                self._floor_after(host)
                return answered
            if pending is not None:
                return pending
            if call.attempts > 0 and body_pos is not None:
                with contextlib.suppress(Exception):
                    request.body.seek(body_pos)  # type: ignore[union-attr]
            # The engine may be what failed, and with it the host's wait: the adapter keeps
            # the floor after a rejection on its own.
            with contextlib.suppress(Exception):
                wait = min(host.floor_until - clock.monotonic(), self.policy.min_sleep)
                if wait > 0:
                    self._sleep(call, wait)
            response = super().send(request, timeout=timeout, **kw)  # type: ignore[arg-type]
            if response.status_code in REJECTIONS:
                self._floor_after(host)
            return response

    def _error(
        self,
        decision: Decision,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> RetryAfterError:
        """The exception a ``hold`` or ``give_up`` decision ends the call with."""
        key = decision.host
        if decision.event == Event.HOLD:
            return _held(key, decision.until, decision.reason, response, request)
        if decision.code == Code.ATTEMPTS:
            return RetryLimitExceeded(
                f"{key}: {decision.reason}; last status {decision.status}",
                host=key,
                response=response,
                request=request,
            )
        return RetryDeadlineExceeded(
            f"{key}: {decision.reason}",
            host=key,
            delay=decision.wait,
            remaining=call.left,
            response=response,
            request=request,
        )

    def _drain(self, response: requests.Response, deadline: float, timeout: TimeoutArg) -> None:
        """Release a rejection before retrying or raising: its body is read for at most
        :data:`DRAIN_SECONDS`, the read timeout and what is left of the deadline."""
        seconds = min(DRAIN_SECONDS, deadline - self.clock.monotonic())
        read = read_timeout(timeout)
        if read is not None:
            seconds = min(seconds, read)
        release(response, seconds)

    def _internal_error(self, host: _Host, phase: str, exc: BaseException) -> None:
        """Log a failure of this adapter's own logic (ERROR, with the host; the traceback the
        first time for that host)."""
        host.internal_errors += 1
        log.error(
            "%s: internal error %s (%s: %s); the request goes on as a plain HTTPAdapter "
            "would send it",
            host.tracker.host,
            phase,
            type(exc).__name__,
            exc,
            exc_info=host.internal_errors == 1,
        )

    def _floor_after(self, host: _Host) -> None:
        """After an internal error on a rejection (returned to the caller as it is): the
        host's next request waits the floor at least. A caller that loops without looking
        at the status (as many scripts do, and a benchmark's client did) would otherwise
        send again at once, hundreds of times a second, for as long as the error lasts.
        The floor is also kept outside the engine, for requests sent by the fallback path
        (the engine may be what fails before each send)."""
        with contextlib.suppress(Exception):
            until = host.floor_until = self.clock.monotonic() + self.policy.min_sleep
            with host.lock:
                tracker = host.tracker
                tracker.not_before = max(tracker.not_before, until)
            log.warning(
                "%s: the host's next request waits %g s (min_sleep) after that rejection",
                tracker.host,
                self.policy.min_sleep,
            )

    def _on_answer(self, host: _Host, response: requests.Response, call: CallState) -> None:
        """Record a response that is not a rejection, and announce what the call makes of it."""
        tracker = host.tracker
        status = response.status_code
        names = _names(response.headers)
        if 200 <= status < 300:
            clock = self.clock
            with host.lock:
                mono, wall = clock.monotonic(), clock.time()
                closing = tracker.episode is not None
                decision = tracker.on_success(mono, wall, sent=call.sent_at)
                if not names.isdisjoint(_STATED_LIMIT_FIELDS):
                    tracker.on_stated_limit(
                        parse_rate_limit(response.headers, now=wall), mono, wall, sent=call.sent_at
                    )
                if closing:  # an episode ended: worth writing now; the rest waits its turn
                    self._sync(host, force=True)
            if decision is not None:
                self._emit(decision)
        retry_after = "retry-after" in names
        if status not in AUTH_STATUSES and not retry_after:
            return  # (most answers: nothing for the call to decide)
        for decision in call.answered(status, retry_after=retry_after):
            if decision.code == Code.HEADER_ON_SUCCESS and not host.warned_ignore:
                host.warned_ignore = True
                log.info("%s: %s (logged once per host)", decision.host, decision.reason)
            self._emit(decision)

    def _on_rejection(self, host: _Host, response: requests.Response, call: CallState) -> Decision:
        """Tell the tracker of a 429/503 and return the call's verdict: a ``sleep`` to retry,
        a ``refuse`` to return the response, a ``hold`` or ``give_up`` to raise."""
        clock, tracker = self.clock, host.tracker
        with host.lock:
            mono, wall = clock.monotonic(), clock.time()
            parsed = parse_retry_after(response.headers.get("Retry-After"), now=wall)
            info = parse_rate_limit(response.headers, now=wall)
            decision = tracker.on_rejection(
                response.status_code, parsed, info, mono, wall, call.attempts
            )
            self._shared_refusal(host, call, wall)
            self._sync(host, force=True)
        self._emit(decision)
        verdict = call.rejected(decision, clock.monotonic())
        if verdict is not decision:
            self._emit(verdict)
        return verdict

    def _await_turn(
        self,
        host: _Host,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
        call: CallState,
    ) -> None:
        """Wait as the call's turn decides (the host's shared wait, its pacing slot); raise
        if the host is held or the call out of time."""
        clock, tracker = self.clock, host.tracker
        while True:
            with host.lock:
                self._sync(host)
                turn = call.turn(tracker, clock.monotonic(), clock.time())
            if turn.decision is not None:
                self._emit(turn.decision)
                if turn.stops:
                    raise self._error(turn.decision, call, response, request)
            if turn.wait <= 0:
                if not turn.shared or self._take_turn(host, call, response, request):
                    return
                continue  # waited for the schedule's next free send to come near: ask again
            self._sleep(call, turn.wait)

    def _take_turn(
        self,
        host: _Host,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> bool:
        """Take this call's send on the host's shared schedule (one atomic store update, in
        which the shared search moves on too) and wait for it. ``False`` when the next free
        send was further off than a send is taken ahead (the call waited until it comes
        near: see :func:`~requests_retryafter._search.early`), or when the host's entry, read
        in those updates, sets a wait for the host (another worker's refusal): the call asks
        for its turn again.
        Without the store (it failed), the call takes its turn on this adapter's copy of the
        schedule, at its share of the rate."""
        tracker, clock = host.tracker, self.clock
        key = tracker.host
        taken: List[float] = []

        def moved(current: Optional[HostState]) -> HostState:
            # The time of this attempt at the update (a contended store retries it): a slot
            # taken at a stale time would go closer to the previous send than the gap.
            now = clock.time()
            checked = self._checked(key, current)
            wait = tracker.workers.early(checked, now)
            if wait > 0 and checked is not None:
                taken[:] = [checked.next_send, now, 0.0, wait]
                return checked  # the entry as it was (checked() returns it): nothing to write
            state, slot = tracker.workers.take_send(checked, now)
            spacing = 0.0
            if slot <= now:
                # The send goes now: it is spaced from the last one in this same update.
                state, spacing = tracker.workers.space_send(state, now)
            taken[:] = [slot, now, spacing, 0.0]
            return state

        stored = self._store_call("update", key, moved)
        with host.lock:
            if not (taken and self._merge_in(tracker, stored, taken[1])):
                now = clock.time()
                tracker.state, slot = tracker.workers.take_send(tracker.state, now, alone=True)
                taken[:] = [slot, now, 0.0, 0.0]
        slot, taken_at, spacing, wait = taken
        if wait > 0:
            self._follow(
                call.queued(slot, wait, clock.monotonic(), taken_at, tracker.share),
                call,
                response,
                request,
            )
            return False
        turn = call.scheduled(slot, clock.monotonic(), taken_at, tracker.share)
        self._follow(turn, call, response, request)
        if turn.wait > 0:
            self._space_send(host, call, response, request)
        else:
            self._follow(call.spaced(spacing, clock.monotonic()), call, response, request)
        with host.lock:
            # The updates read the host's entry: a refusal another worker met meanwhile set
            # a wait for the host, and this send waits for it too (its turn is asked again).
            return tracker.gate(clock.monotonic(), clock.time()) <= 0

    def _space_send(
        self,
        host: _Host,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> None:
        """After waiting for a slot on the host's shared schedule, just before the send, in one
        atomic store update: record it, and wait until a gap after the last send that went
        (the worker before this one may have woken late for its slot: see
        :meth:`~requests_retryafter.state.HostState.with_send_spaced`). The update also reads
        a refusal another worker met while this one waited (:meth:`_take_turn` looks at the
        host's wait again). Without the store, nothing more: this worker's own sends are
        spaced."""
        tracker, clock = host.tracker, self.clock
        key = tracker.host
        spaced: List[float] = []

        def sent_now(current: Optional[HostState]) -> HostState:
            now = clock.time()
            state, wait = tracker.workers.space_send(self._checked(key, current), now)
            spaced[:] = [wait, now]
            return state

        stored = self._store_call("update", key, sent_now)
        with host.lock:
            if not (spaced and self._merge_in(tracker, stored, spaced[1])):
                return
        self._follow(call.spaced(spaced[0], clock.monotonic()), call, response, request)

    def _follow(
        self,
        turn: Turn,
        call: CallState,
        response: Optional[requests.Response],
        request: requests.PreparedRequest,
    ) -> None:
        """Carry out a turn on the host's shared schedule: announce its decision, raise if it
        stops the call, sleep its wait."""
        if turn.decision is not None:
            self._emit(turn.decision)
            if turn.stops:
                raise self._error(turn.decision, call, response, request)
        if turn.wait > 0:
            self._sleep(call, turn.wait)

    def _shared_refusal(self, host: _Host, call: CallState, wall: float) -> None:
        """Tell the host's shared search of this call's refusal (one atomic store update;
        under ``host.lock``); a hold says nothing of the rate."""
        tracker = host.tracker
        episode = tracker.episode
        if tracker.send_gap() is None or episode is None or call.sent_slot_at is None:
            return
        if tracker.held(wall):
            return
        key, slot_at, first = tracker.host, call.sent_slot_at, episode.fails == 1

        def refused(current: Optional[HostState]) -> HostState:
            return tracker.workers.shared_refusal(
                self._checked(key, current), slot_at, wall, first=first
            )

        if not self._merge_in(tracker, self._store_call("update", key, refused), wall):
            tracker.state = tracker.workers.shared_refusal(
                tracker.state, slot_at, wall, first=first, alone=True
            )


def _held(
    key: str,
    until: float,
    reason: str,
    response: Optional[requests.Response],
    request: requests.PreparedRequest,
) -> HostHeld:
    return HostHeld(
        f"{key} is held until {utc_iso(until)}: {reason}",
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


def _names(headers: Mapping[str, str]) -> AbstractSet[str]:
    """The lowercase names of ``headers`` (without a copy for requests' CaseInsensitiveDict,
    whose ``_store`` is keyed by lowercase name)."""
    store = getattr(headers, "_store", None)
    if isinstance(store, dict):
        return store.keys()
    return {name.lower() for name in headers}


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


def _store_spec_of(spec: Union[str, StateStore, None]) -> Optional[str]:
    """The spec a store is pickled as (see :class:`RetryAfterAdapter`): a spec string as it
    is; a store object's ``spec``, or a file store's ``scheme://path``; else ``None``."""
    if spec is None or isinstance(spec, str):
        return spec
    own = getattr(spec, "spec", None)
    if isinstance(own, str):
        return own
    scheme, path = getattr(spec, "scheme", None), getattr(spec, "path", None)
    if scheme in ("json", "sqlite", "shelve") and isinstance(path, str) and os.path.isabs(path):
        return f"{scheme}://{path}"
    return None
