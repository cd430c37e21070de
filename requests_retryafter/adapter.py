"""``RetryAfterAdapter``: a drop-in :class:`requests.adapters.HTTPAdapter` that retries 429 and
503 the way a good citizen should, however the host's ``Retry-After`` lies.

The adapter does the I/O: it sends, sleeps and raises as it is told (its retry loop is
:mod:`._sending`). Its hosts and their store are :mod:`._hosts`; the turns before each send
and the recording of each answer are :mod:`._turns`; what a call may do is :mod:`.calls`, and
what a host's answers mean is :mod:`.engine`.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import uuid
import weakref
from dataclasses import fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union, cast

import requests
from requests.adapters import HTTPAdapter

from ._compat import connection_retry
from ._hosts import GuardedStore, Hosts
from ._sending import Sending
from ._traces import TRACE_ATTRIBUTE, HostSummary, RetryTrace, trace, trace_of
from ._transport import TimeoutArg
from ._turns import Turns
from .calls import CallState
from .clock import Clock, SystemClock
from .decisions import Code, Decision, Event
from .errors import ConfigurationError, RetryAfterError, StoreError
from .policy import ENV_PREFIX, Policy, resolve
from .stores import MemoryStore, StateStore, open_store

__all__ = ["HostSummary", "RetryAfterAdapter", "RetryTrace", "mount", "trace_of"]

log = logging.getLogger(__name__)

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
        adapter._hosts.leave()  # the process is leaving its hosts' shared pace


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
            refusals, category changes), for progress displays and metrics. It is called
            outside the adapter's locks: a slow hook holds up only the call that announces
            the decision, and a hook may send requests itself.
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
        self._guarded = GuardedStore(self.store, self.clock)
        self._rng = random.Random(self._seed)  # the jitter's, for the calls and the trackers
        worker = uuid.uuid4().hex[:12]
        emit = _weakly(self._emit)
        self._hosts = Hosts(self.policy, self.clock, self._guarded, self._rng, worker, emit)
        self._turns = Turns(self._hosts, self.clock, emit)
        self._sending = Sending(self.policy, self.clock, self._turns, emit)
        self._closed = False
        # Guards closing and opening again (a send after close()); ``_closing`` is set while
        # a close writes and closes the store, when no send opens the adapter again.
        self._lifecycle = threading.RLock()
        self._closing = False
        self._calls = threading.local()
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

    def flush(self) -> None:
        """Write every host's unsaved changes to the store now."""
        self._hosts.flush()

    def close(self) -> None:
        """Flush to the store, close it (when this adapter opened it), then close the pools.

        On a shared store, the adapter also records that it left its hosts' shared pace: the
        other workers, and the next run, no longer keep a share of each host's rate for it.
        A step up of a host's even pace under way, not refused, is kept on trial first: the
        next run starts from it (see ``LimitEstimate.held``).
        """
        with self._lifecycle:
            closing = not self._closed
            if closing:
                self._closed = self._closing = True
                store = self.store
        if closing:
            # Not under the lock: writing takes every host's lock, under which a hook may
            # run, and a hook may send or close.
            try:
                self._guarded.try_again()  # one more try for what is unsaved
                self._hosts.closing()
                self.flush()
                self._hosts.leave()
                if self._owns_store:
                    try:
                        store.close()
                    except (StoreError, OSError) as exc:  # pragma: no cover - defensive
                        log.warning("closing store failed: %s", type(exc).__name__)
                _live_adapters.discard(self)
            finally:
                with self._lifecycle:
                    self._closing = False
        # (Typed in some types-requests releases, not in others: called as Any for both.)
        cast(Any, super()).close()

    def _reopen(self) -> None:
        """Open again for a request after :meth:`close`, as a plain ``HTTPAdapter`` serves
        one (a session closed and used again): a store this adapter opened from a spec is
        opened again (a file store at the path it was opened at; an in-memory one, which
        closing left as it was, is kept), the hosts it knows stay known, and on a shared
        store it counts among their workers again. Used on the closed store, the store
        failed at every write, and what was learned after ``close()`` was lost. Not while a
        close is under way (in another thread, or a hook's send in the closing one): opened
        in the middle, the close closed the new store and left the first open."""
        failed: Optional[Exception] = None
        with self._lifecycle:
            if not self._closed or self._closing:
                # Open, or a close under way: this call goes on as the adapter is (what it
                # writes waits for the next sync), and the next after the close opens it.
                return
            if self._owns_store and not isinstance(self.store, MemoryStore):
                # A file store at the path it was opened at (a relative spec would now
                # resolve against another working directory), else the spec.
                spec = _store_spec_of(self.store) or self._store_spec
                try:
                    store: StateStore = open_store(spec)
                except Exception as exc:  # never stop a job: carry on in memory
                    failed, store = exc, MemoryStore()
                self.store = self._guarded.store = store
            self._guarded.try_again()
            self._hosts.back()
            self._closed = False
            _live_adapters.add(self)
        if failed is not None:  # (logged outside the lock: a log handler may send)
            text = f": {failed}" if isinstance(failed, (StoreError, OSError)) else ""
            log.warning(
                "store could not be opened again (%s%s); using an in-memory store",
                type(failed).__name__,
                text,
            )

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
            turnstile = None if call is None else call.turnstile
            if turnstile is not None:
                # The hook runs with the host's turnstile let go (see CallState.turnstile).
                turnstile.release()
            try:
                self.on_decision(decision)
            except Exception:
                log.exception("on_decision hook raised; ignored")
            finally:
                # Taken back if free; else another call took its turn meanwhile, and this
                # one goes on without it (on its place, if it reserved one).
                if call is not None and turnstile is not None and not turnstile.acquire(False):
                    call.turnstile = None

    def _call(self) -> Optional[CallState]:
        """The call this thread is in, if any."""
        stack: Optional[List[CallState]] = getattr(self._calls, "stack", None)
        return stack[-1] if stack else None

    def summary(self) -> Dict[str, HostSummary]:
        """What this adapter did so far, per host key (a copy): calls, requests, refusals,
        waits and the seconds they took, holds and give-ups.

        .. versionadded:: 0.1.0
        """
        return self._hosts.summaries.summary()

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
            if self._closed:
                self._reopen()
            host = self._hosts.use(request.url or "")
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
            response = self._sending.send(host, request, timeout, super().send, kw, call)
        except RetryAfterError as exc:
            if exc.response is not None:
                setattr(exc.response, TRACE_ATTRIBUTE, trace(call, host.sent_once))
            raise
        else:
            setattr(response, TRACE_ATTRIBUTE, trace(call, host.sent_once))
            return response
        finally:
            stack.pop()
            self._hosts.done_with(host, call)


def _weakly(emit: DecisionHook) -> DecisionHook:
    """``emit`` (a bound method of the adapter), held weakly: the adapter's parts that announce
    decisions do not keep it alive, so an adapter dropped without :meth:`close` is freed at
    once, as a plain ``HTTPAdapter`` is (and a store it opened with it)."""
    method = weakref.WeakMethod(emit)

    def call(decision: Decision) -> None:
        bound = method()
        if bound is not None:
            bound(decision)

    return call


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
