"""An adapter's hosts: each host's runtime in memory (its tracker, lock and request slots),
the store where workers share what they learn of it, and keeping the two in step."""

from __future__ import annotations

import heapq
import logging
import queue
import random
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._server_clock import ServerClock
from ._traces import RetryTrace, Summaries, Tally
from .calls import CallState
from .clock import Clock
from .decisions import Decision
from .engine import HostTracker
from .policy import Policy
from .state import HostState, host_key
from .stores import StateStore

__all__ = ["HOSTS_LOW_WATER", "MAX_HOSTS", "GuardedStore", "Host", "Hosts", "Slots"]

#: The adapter's logger: what this module logs is the adapter's doing, under its name.
log = logging.getLogger("requests_retryafter.adapter")

#: Hosts an adapter keeps in memory before it drops idle healthy ones (least recently used
#: first), down to :data:`HOSTS_LOW_WATER`. A host that is held, waiting, in an episode, in
#: use, paced within its window, or has unsaved changes the store would not take, is kept.
MAX_HOSTS = 1024
HOSTS_LOW_WATER = 896
#: URLs' schemes and authorities remembered with their host (several may share one, as
#: ``HOST`` and ``host:443`` do): forgotten all at once beyond this many, and when hosts leave
#: memory.
MAX_AUTHORITIES = 4096
#: After a store call fails, no store call for this many seconds; each further failure
#: doubles it, up to :data:`STORE_RETRY_MAX`.
STORE_RETRY_FIRST = 30.0
STORE_RETRY_MAX = 300.0
_STORE_WRITES = frozenset({"update", "set", "delete"})


class Slots:
    """A host's requests in flight, at most ``size`` at once: a counting semaphore kept as a
    queue of ``size`` tokens. Uncontended, taking and giving back a token are each one call
    into C (``queue.SimpleQueue``): cheaper, every request, than a count kept under a lock
    (in Python 3.11 entering ``with lock:`` parses its arguments) and than
    ``threading.BoundedSemaphore`` (a ``Condition`` in Python both ways)."""

    __slots__ = ("_lock", "_tokens", "_waiting")

    def __init__(self, size: int) -> None:
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(size):
            self._tokens.put(None)
        #: Threads waiting for a slot now (counted under ``_lock``).
        self._waiting = 0
        self._lock = threading.Lock()

    def acquire(self) -> bool:
        """Take a slot; return whether this had to wait for one."""
        try:
            self._tokens.get_nowait()
            return False
        except queue.Empty:
            pass
        with self._lock:
            self._waiting += 1
        try:
            self._tokens.get()
        finally:
            with self._lock:
                self._waiting -= 1
        return True

    def release(self) -> None:
        """Give a slot back."""
        self._tokens.put(None)


class Host:
    """An adapter's runtime for one host: the tracker plus its lock and concurrency cap."""

    __slots__ = (
        "back",
        "floor_until",
        "internal_errors",
        "last_sync",
        "last_used",
        "lock",
        "news",
        "sent_once",
        "server_clock",
        "slots",
        "tally",
        "tracker",
        "turnstile",
        "users",
        "warned_ignore",
    )

    def __init__(self, tracker: HostTracker, max_concurrency: int, tally: Tally) -> None:
        self.tracker = tracker
        #: The host key's summary, counted as each call ends.
        self.tally = tally
        self.lock = threading.RLock()
        self.slots = Slots(max_concurrency)
        #: Held by the one call that waits for its turn on the host: from before its turn is
        #: asked until its request goes (until its answer, and those of the requests on the
        #: wire beside it, while the host refuses, after its period's last place, for the
        #: run's first request and at the last place the host's statements leave). The
        #: adapter's threads come to the host one at a time, as one client's requests do:
        #: see ``Turns.take_turnstile``.
        self.turnstile = threading.Lock()
        #: Notified (under :attr:`lock`) as each request to the host comes back: a call that
        #: kept the turnstile while its request was on the wire lets it go once every
        #: request on the wire is back (see ``Sending``).
        self.back = threading.Condition(self.lock)
        self.last_sync = float("-inf")
        self.warned_ignore = False
        #: Calls using this host now (counted under the hosts' lock).
        self.users = 0
        #: Monotonic time the last call using this host ended.
        self.last_used = float("-inf")
        self.internal_errors = 0
        #: Monotonic time before which no request to the host goes by the fallback path
        #: (after an internal error): see RetryAfterAdapter._floor_after.
        self.floor_until = float("-inf")
        #: How far the host's clock reads from this machine's (its answers' ``Date``): its
        #: epoch resets and HTTP-dates are read on it.
        self.server_clock = ServerClock(tracker.tuning)
        #: The trace of a call that sent one request and decided nothing (most calls).
        self.sent_once = RetryTrace(tracker.host, 1, 0, 0.0, ())
        #: Decisions made under the host's lock that are not announced yet: a re-judgement
        #: of what other workers stored (see :meth:`Hosts.announce`).
        self.news: List[Decision] = []


class GuardedStore:
    """A store whose failures never stop a call: a call that fails returns ``None``, and the
    store is skipped (``None``) until its pause is over: 30 s after a failure, doubling with
    each failure up to 5 min. One warning when it fails (naming the store and the error), one
    when it is reachable again."""

    def __init__(self, store: StateStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._lock = threading.Lock()
        self._down_since: Optional[float] = None
        self._retry_at = float("-inf")
        self._pause = 0.0
        self._write_failed = False

    @property
    def shared(self) -> bool:
        """Whether other processes use the store too (SQLite, Redis)."""
        return bool(getattr(self.store, "shared", False))

    def try_again(self) -> None:
        """End the pause after a failure now (one more try for what is unsaved)."""
        self._retry_at = float("-inf")

    def call(self, name: str, *args: Any) -> Any:
        """The store's method ``name`` with ``args``; ``None`` when it failed or is paused."""
        store = self.store
        if self._down_since is not None and self.clock.monotonic() < self._retry_at:
            return None
        try:
            result = getattr(store, name)(*args)
        except Exception as exc:  # any failure of a store is a store failure
            with self._lock:
                mono = self.clock.monotonic()
                first = self._down_since is None
                if name in _STORE_WRITES:
                    self._write_failed = True
                if first:
                    self._down_since = mono
                    self._pause = STORE_RETRY_FIRST
                else:
                    self._pause = min(STORE_RETRY_MAX, 2 * self._pause)
                self._retry_at = mono + self._pause
                pause = self._pause
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
        if self._down_since is not None and (name in _STORE_WRITES or not self._write_failed):
            # (a read that works says nothing of writes that failed: a full disk)
            with self._lock:
                since, self._down_since = self._down_since, None
                self._pause = 0.0
                self._write_failed = False
            if since is not None:
                log.warning(
                    "store %r is reachable again after %.0f s",
                    store,
                    self.clock.monotonic() - since,
                )
        return result


class Hosts:
    """The hosts an adapter has in memory, and their entries in the store.

    Args:
        policy: the adapter's policy.
        clock: the adapter's clock.
        guarded: the store, behind its guard.
        rng: the jitter's random source, for every tracker.
        worker: this adapter's worker id (in shared stores' heartbeats).
        emit: announces a decision (one a tracker makes of what other workers stored).
    """

    def __init__(
        self,
        policy: Policy,
        clock: Clock,
        guarded: GuardedStore,
        rng: random.Random,
        worker: str,
        emit: Callable[[Decision], None],
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.guarded = guarded
        self._rng = rng
        self._worker = worker
        # Whether this adapter left its hosts' shared pace (it was closed).
        self._left = False
        self._emit = emit
        #: The runtimes by host key.
        self.by_key: Dict[str, Host] = {}
        #: The runtimes by the scheme and authority of the URLs sent (what a host key is
        #: made of): a URL's host without parsing it.
        self._by_authority: Dict[str, Host] = {}
        self._lock = threading.Lock()
        #: Every host key's calls so far (counted in :meth:`done_with`).
        self.summaries = Summaries(self._lock)

    def use(self, url: str) -> Host:
        """The runtime of ``url``'s host, counted as in use until :meth:`done_with`."""
        authority = "/".join(url.split("/", 3)[:3])
        with self._lock:
            host = self._by_authority.get(authority)
            if host is not None:
                host.users += 1
                return host
        key = host_key(url)
        with self._lock:
            host = self.by_key.get(key)
        if host is None:
            # Read the store outside the hosts lock: a slow store must not hold up other hosts.
            host = self._new(key)
        with self._lock:
            host = self.by_key.setdefault(key, host)
            if len(self._by_authority) >= MAX_AUTHORITIES:
                self._by_authority.clear()
            self._by_authority[authority] = host
            host.users += 1
            crowded = len(self.by_key) > MAX_HOSTS
        if crowded:
            self._evict()
        return host

    def done_with(self, host: Host, call: CallState) -> None:
        """End a use of ``host`` that :meth:`use` began, by ``call``, and count the call in
        the host's summary."""
        with self._lock:
            host.users -= 1
            host.last_used = self.clock.monotonic()
            try:
                host.tally.count(call)
            except Exception:  # counting must never break a call
                log.debug("%s: the call was not counted in summary()", call.host, exc_info=True)

    def _new(self, key: str) -> Host:
        state = self.checked(key, self.guarded.call("get", key)) or HostState(key)
        try:
            tracker = HostTracker(state, self.policy, self._rng, self._worker)
        except Exception as exc:
            log.warning(
                "%s: stored state unusable (%s: %s); starting fresh", key, type(exc).__name__, exc
            )
            tracker = HostTracker(HostState(key), self.policy, self._rng, self._worker)
        return Host(tracker, self.policy.max_concurrency, self.summaries.tally(key))

    def checked(self, key: str, stored: Any) -> Optional[HostState]:
        """A state the store handed over, if it is one and every value is in range; a damaged
        one is dropped with a warning (the host starts fresh, and the next write replaces it)."""
        if not isinstance(stored, HostState):
            return None
        try:
            return stored.checked()
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("%s: stored state dropped, starting fresh: %s", key, exc)
            return None

    def _idle(self, host: Host, mono: float, wall: float) -> bool:
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
        with self._lock:
            excess = len(self.by_key) - HOSTS_LOW_WATER
            if excess <= 0:
                return
            # Look at a bounded number of the least recently used (busy ones are skipped).
            oldest: List[Tuple[str, Host]] = heapq.nsmallest(
                excess + 64, self.by_key.items(), key=lambda item: item[1].last_used
            )
        evicted = 0
        for key, host in oldest:
            if evicted >= excess:
                break
            with host.lock:
                mono, wall = clock.monotonic(), clock.time()
                if not self._idle(host, mono, wall):
                    continue
                tracker = host.tracker
                if self.guarded.shared:
                    # It no longer paces the host: the other workers take its share at their
                    # next read, as when the adapter closes (counted until its heartbeat was
                    # WORKER_TTL old, they kept to a smaller share). Back at the host, its
                    # next heartbeat counts it again.
                    tracker.workers.leave(wall)
                if tracker.dirty:
                    self.write(host, wall)  # (no heartbeat first: it is leaving)
                    if tracker.dirty:
                        continue  # the store did not take it: keep it in memory
                with self._lock:
                    if self.by_key.get(key) is host and not host.users:
                        del self.by_key[key]
                        # No URL finds it from here on (a host that left, used again, would
                        # run beside the one read afresh from the store).
                        self._by_authority.clear()
                        evicted += 1
        for _, host in oldest:
            self.announce(host)  # what the writes decided (none: nothing to announce)
        if evicted:
            log.debug("%d idle hosts dropped from memory", evicted)

    def sync(self, host: Host, *, force: bool = False, count: bool = False) -> None:
        """Write what changed and read what other workers wrote (under ``host.lock``; what
        that decides waits in ``host.news`` until :meth:`announce`).

        ``count``: a request is about to take its turn on a host that makes it wait or
        paces it. A worker alone on a shared store then reads the store (no write) even
        between syncs, so that workers that started since are counted before this one sends
        again on its own: workers of one job start together, and the one that came first,
        alone at its first read, sent its whole pace beside their shared schedule until its
        next sync (twice the host's rate for up to ``sync_interval``)."""
        mono = self.clock.monotonic()
        if not force and mono - host.last_sync < self.policy.sync_interval:
            if count and host.tracker.share <= 1 and self.guarded.shared and not self._left:
                wall = self.clock.time()
                self._read_shared(host, wall)
                host.tracker.workers.count(wall)
            return  # (most requests)
        tracker = host.tracker
        shared = self.guarded.shared
        if not (force or shared or tracker.dirty):
            return
        host.last_sync = mono
        wall = self.clock.time()
        beat = shared and not self._left and tracker.heartbeat(wall)
        if tracker.dirty:
            self.write(host, wall)
        elif shared:
            self._read_shared(host, wall)
            if not beat and not self._left and tracker.heartbeat(wall):
                # The store says the host refused another worker, and makes this one wait:
                # this worker is counted at once, so that the returns from that wait are
                # spread between all the workers waiting (counted only at its own first
                # refusal, it came back with the others into a bucket that lets one through).
                self.write(host, wall)
        if shared:
            tracker.workers.count(wall)  # with the other workers' heartbeats merged in

    def write(self, host: Host, wall: float) -> None:
        """Write the host's state, merged with the store's entry, and adopt the result
        (under the host's lock)."""
        tracker = host.tracker
        local = tracker.state
        name = tracker.host

        def merged(current: Optional[HostState]) -> HostState:
            # A damaged entry in the store is replaced, never merged into what we write.
            return local.merge(self.checked(name, current))

        stored = self.checked(name, self.guarded.call("update", name, merged))
        if isinstance(stored, HostState):
            tracker.dirty = False
            self._adopt(host, stored, wall)

    def _read_shared(self, host: Host, wall: float) -> None:
        """Read what other workers wrote of the host and merge it in (under ``host.lock``)."""
        tracker = host.tracker
        stored = self.checked(tracker.host, self.guarded.call("get", tracker.host))
        if stored is not tracker.state:
            self.merge_in(host, stored, wall)

    def merge_in(self, host: Host, stored: Any, wall: float) -> bool:
        """Merge ``stored`` (what a store call returned) into the host's state; ``False``
        when it is no state (the store failed, or the entry was refused). Under
        ``host.lock``: what the merge decides waits in ``host.news`` (see :meth:`announce`)."""
        if not isinstance(stored, HostState):
            return False
        self._adopt(host, host.tracker.state.merge(stored), wall)
        return True

    def _adopt(self, host: Host, merged: HostState, wall: float) -> None:
        tracker = host.tracker
        if merged.observations != tracker.state.observations:
            dirty = tracker.dirty
            decision = tracker.rejudge(merged, wall)
            tracker.dirty = dirty or decision is not None
            if decision is not None:
                host.news.append(decision)
        else:
            tracker.state = merged

    def announce(self, host: Host) -> None:
        """Announce the decisions made under ``host.lock`` (:meth:`merge_in`, :meth:`sync`)
        once it is released: a slow ``on_decision`` hook then holds up no other thread of
        the host, and a hook that sends to the host itself, or waits for a thread that
        does, cannot stall it. Whichever thread comes first announces them, once."""
        news = host.news
        while news:
            try:
                decision = news.pop(0)
            except IndexError:  # another thread announced the last one meanwhile
                return
            self._emit(decision)

    def leave(self) -> None:
        """Record in the store that this adapter no longer paces its hosts (it is closing),
        so that the workers still at them, and a run that follows within ``WORKER_TTL``, do
        not keep a share for it."""
        self._left = True  # no heartbeat from here on (a later write would undo this)
        if not self.guarded.shared:
            return
        with self._lock:
            hosts = list(self.by_key.values())
        wall = self.clock.time()
        for host in hosts:
            with host.lock:
                if host.tracker.workers.leave(wall):
                    self.write(host, wall)  # no heartbeat first: it is leaving
            self.announce(host)

    def back(self) -> None:
        """Heartbeat again: the adapter that left its hosts (:meth:`leave`) is used again.
        Each host's next heartbeat counts this worker there again."""
        self._left = False

    def closing(self) -> None:
        """The adapter closes: each host keeps what the next run starts from
        (:meth:`HostTracker.closing <requests_retryafter.engine.HostTracker.closing>`)."""
        with self._lock:
            hosts = list(self.by_key.values())
        wall = self.clock.time()
        for host in hosts:
            with host.lock:
                host.tracker.closing(wall)

    def flush(self) -> None:
        """Write every host's unsaved changes to the store now."""
        with self._lock:
            hosts = list(self.by_key.values())
        for host in hosts:
            with host.lock:
                if host.tracker.dirty:
                    self.sync(host, force=True)
            self.announce(host)
