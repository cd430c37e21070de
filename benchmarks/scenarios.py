"""The benchmarks' *lying portals*: scenarios of local HTTP servers that rate-limit like real
open-data portals and send ``Retry-After`` the way real portals do, truthfully or not, with
the time a perfect client would need for them and the verdict a good client should reach.

This is benchmark code, not part of the installed package. The server and the limits users
need are :mod:`requests_retryafter.testing` (:class:`Portal` is its
:class:`~requests_retryafter.testing.RateLimitedServer` named first); this module adds what
only the benchmarks and their tests use:

- :func:`standard_scenarios` and :func:`extra_scenarios` (:class:`Scenario` recipes, each
  with ``kind``, the DOMAIN category a good client should judge the host to be), built when
  called; :data:`SCENARIOS` is the standard set, built on first use;
- :func:`ideal_duration` and :func:`steady_duration`, the least time a client can take;
- limits the benchmarks add: :class:`FirstRequestWindow`, :class:`HourlyQuota`,
  :class:`LeakyBucket` and :func:`nginx_limit_req`.

The scripts next to it import it as ``scenarios`` (``python benchmarks/bench_portals.py``
puts this directory first on ``sys.path``)::

    from requests_retryafter.clock import FakeClock
    from scenarios import FixedWindow, Portal

    clock = FakeClock()
    with Portal("county", FixedWindow(40, 60), "constant", clock, constant=3600) as portal:
        requests.get(portal.url + "/records/1")   # 200, then 429 with Retry-After: 3600
        print(portal.stats.rejected)

This module uses the standard library and :mod:`requests_retryafter.testing` only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from requests_retryafter.clock import Clock
from requests_retryafter.testing import (
    _EPS,
    _GARBAGE_VALUES,
    BEHAVIOURS,
    RATE_HEADER_STYLES,
    FixedWindow,
    Hit,
    Limiter,
    Maintenance,
    RateLimitedServer,
    SlidingWindow,
    SlidingWindowCounter,
    Sporadic,
    TokenBucket,
    Unlimited,
    _format_http_date,
    _next_open,
    _policy_window,
    _quota,
    _rate_limit_headers,
    _Window,
)
from requests_retryafter.testing import ServerStats as PortalStats

__all__ = [
    "BEHAVIOURS",
    "RATE_HEADER_STYLES",
    "FirstRequestWindow",
    "FixedWindow",
    "Hit",
    "HourlyQuota",
    "LeakyBucket",
    "Limiter",
    "Maintenance",
    "Portal",
    "PortalStats",
    "Scenario",
    "SlidingWindow",
    "SlidingWindowCounter",
    "Sporadic",
    "Unlimited",
    "format_http_date",
    "extra_scenarios",
    "ideal_duration",
    "next_open",
    "nginx_limit_req",
    "quota",
    "rate_limit_headers",
    "standard_scenarios",
    "steady_duration",
]

#: The values the ``garbage`` behaviour cycles through, in order.
GARBAGE_VALUES: Tuple[str, ...] = _GARBAGE_VALUES

#: The IMF-fixdate of an epoch time (``Thu, 01 Jan 1970 00:00:00 GMT`` for 0).
format_http_date = _format_http_date
#: ``(limit, remaining, reset_at)`` as a limiter library would state them, or ``None``.
quota = _quota
#: The rate-limit fields of one of :data:`RATE_HEADER_STYLES` for a limiter at a time.
rate_limit_headers = _rate_limit_headers
#: The earliest time a limiter accepts a request outside a maintenance window.
next_open = _next_open


# --------------------------------------------------------------------------------------------
# Enforced limits the benchmarks add to those of requests_retryafter.testing
# --------------------------------------------------------------------------------------------


class FirstRequestWindow(_Window):
    """At most ``limit`` requests per window of ``window`` seconds, where a window starts at
    the first request accepted after the previous one expired (not on the clock), as a
    counter with an expiry set at its first hit does (e.g. a Redis ``INCR`` + ``EXPIRE``).
    Yesterday's phase means nothing here."""

    def __init__(self, limit: int, window: float) -> None:
        super().__init__(limit, window)
        self._start: Optional[float] = None
        self._count = 0

    def _active(self, now: float) -> bool:
        return self._start is not None and now < self._start + self.window - _EPS

    def next_free(self, now: float) -> float:
        """``now`` while the current window has room or none is open, else its end."""
        if self._active(now) and self._count >= self.limit:
            assert self._start is not None
            return self._start + self.window
        return now

    def consume(self, now: float) -> None:
        """Count a request, opening a window at ``now`` when none is open."""
        if not self._active(now):
            self._start = now
            self._count = 0
        self._count += 1

    def quota(self, now: float) -> Tuple[int, int, float]:
        """``(limit, remaining, reset_at)``: the open window's end (``now + window`` if none)."""
        if not self._active(now):
            return self.limit, self.limit, now + self.window
        assert self._start is not None
        return self.limit, max(0, self.limit - self._count), self._start + self.window


class HourlyQuota(FixedWindow):
    """At most ``limit`` requests per hour; the quota resets at the top of each hour of the
    clock's epoch time (multiples of 3600 s). ``period`` changes the hour (for short runs)."""

    def __init__(self, limit: int, period: float = 3600.0) -> None:
        super().__init__(limit, period)

    def __repr__(self) -> str:
        if self.window == 3600.0:
            return f"HourlyQuota(limit={self.limit})"
        return f"HourlyQuota(limit={self.limit}, period={self.window:g})"


class LeakyBucket(TokenBucket):
    """:class:`~requests_retryafter.testing.TokenBucket` under the name the benchmarks know it
    by: holds at most ``burst`` tokens (full at first), gains ``rate`` tokens per second; each
    accepted request takes one."""


def nginx_limit_req(rate: float, burst: int = 0) -> LeakyBucket:
    """The bucket nginx's ``limit_req zone=... rate=RATEr/s [burst=BURST] nodelay`` enforces:
    a request is refused sooner than ``1 / rate`` after the last accepted one unless ``burst``
    requests of excess are left, so it is a :class:`LeakyBucket` of depth ``burst + 1``.

    >>> nginx_limit_req(10)
    LeakyBucket(rate=10, burst=1)
    """
    if burst < 0:
        raise ValueError("burst cannot be negative")
    return LeakyBucket(rate, burst + 1)


def ideal_duration(
    limiter: Limiter,
    count: int,
    *,
    start: float,
    maintenance: Optional[Maintenance] = None,
) -> float:
    """Seconds a perfect client needs for ``count`` accepted requests, starting at ``start``.

    The perfect client knows the enforced limit, sends each request at the first moment it
    would be accepted and never gets a rejection; service time is zero. The result is the time
    of the last accepted request minus ``start`` (a fresh copy of ``limiter`` is used).
    """
    fresh = limiter.fresh()
    moment = start
    for _ in range(max(0, count)):
        moment = next_open(fresh, maintenance, moment)
        fresh.consume(moment)
    return moment - start


def steady_duration(
    limiter: Limiter,
    count: int,
    *,
    start: float,
    maintenance: Optional[Maintenance] = None,
) -> float:
    """Seconds a client sending evenly at exactly ``limiter.rate`` needs for ``count``
    requests from ``start`` (one every ``1 / rate`` seconds, the first at ``start``, none
    during ``maintenance``: a request due in it goes at its end and the rest follow).

    Unlike :func:`ideal_duration` this uses no burst: it is the time at the limit's long-run
    rate, which a client pacing at a fraction of a learned limit is measured against.
    """
    if count <= 0 or math.isinf(limiter.rate):
        return 0.0
    gap = 1.0 / limiter.rate
    moment = start
    for index in range(count):
        if index:
            moment += gap
        if maintenance is not None and maintenance.active(moment):
            moment = maintenance.end
    return moment - start


# --------------------------------------------------------------------------------------------
# The portal
# --------------------------------------------------------------------------------------------


class Portal(RateLimitedServer):
    """A :class:`~requests_retryafter.testing.RateLimitedServer` named first, as the benchmarks
    build it: ``Portal(name, limiter, behaviour, clock, **options)``.

    ``behaviour`` is the server's ``retry_after``; every option (``maintenance``, ``constant``,
    ``seed``, ``rate_headers``, ``address``, ``port``, ...) is passed on unchanged: see
    :class:`~requests_retryafter.testing.RateLimitedServer` for what each means and its
    default. Bodies name the portal under ``"portal"``; the ``Server`` header is
    ``lying-portal/1``.
    """

    server_header = "lying-portal/1"
    _body_key = "portal"

    def __init__(
        self,
        name: str,
        limiter: Limiter,
        behaviour: str = "truthful",
        clock: Optional[Clock] = None,
        **options: Any,
    ) -> None:
        super().__init__(limiter, behaviour, clock=clock, name=name, **options)

    def __repr__(self) -> str:
        return (
            f"Portal({self.name!r}, {self.limiter!r}, {self.behaviour!r}, "
            f"maintenance={self.maintenance!r})"
        )


# --------------------------------------------------------------------------------------------
# Standard scenarios
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A portal recipe with times relative to when it is built.

    ``limiter`` is a template (each :meth:`build` uses a fresh copy). ``maintenance`` and
    ``switch_after`` are offsets in seconds from the clock's time at :meth:`build`.
    ``kind`` is the DOMAIN category a good client should judge the host to be.
    """

    name: str
    description: str
    limiter: Limiter
    behaviour: str
    kind: str
    urls: int = 300
    maintenance: Optional[Tuple[float, float]] = None
    switch_after: Optional[float] = None
    constant: int = 3600
    random_range: Tuple[int, int] = (0, 120)
    seed: int = 0
    tags: Tuple[str, ...] = field(default=())
    #: One of :data:`RATE_HEADER_STYLES`, sent on every answer; ``None`` for none.
    rate_headers: Optional[str] = None
    #: Virtual seconds a request takes to reach the portal (``RateLimitedServer``'s
    #: ``latency``).
    latency: float = 0.0
    #: Whether the limiter counts refused requests too (``RateLimitedServer``'s
    #: ``count_refused``).
    count_refused: bool = False

    @property
    def period(self) -> float:
        """The limiter's natural period: its window, a bucket's refill time from empty to
        full (``burst / rate``), else 60 s. Start phases of benchmark sweeps are spread over
        it."""
        window = _policy_window(self.limiter)
        return window if window is not None and window > 0 else 60.0

    def maintenance_window(self, start: float) -> Optional[Maintenance]:
        """The maintenance window for a portal built at ``start``."""
        if self.maintenance is None:
            return None
        return Maintenance(start + self.maintenance[0], start + self.maintenance[1])

    def build(self, clock: Clock, *, port: int = 0, start: Optional[float] = None) -> Portal:
        """Return a (not yet started) :class:`Portal` for this scenario on ``clock``; offsets
        count from ``start`` (default: ``clock.time()`` now)."""
        origin = clock.time() if start is None else start
        return Portal(
            self.name,
            self.limiter.fresh(),
            self.behaviour,
            clock,
            maintenance=self.maintenance_window(origin),
            constant=self.constant,
            random_range=self.random_range,
            seed=self.seed,
            switch_at=None if self.switch_after is None else origin + self.switch_after,
            rate_headers=self.rate_headers,
            latency=self.latency,
            count_refused=self.count_refused,
            port=port,
        )

    def ideal_seconds(self, start: float, count: Optional[int] = None) -> float:
        """:func:`ideal_duration` of ``count`` (default :attr:`urls`) requests from ``start``."""
        return ideal_duration(
            self.limiter,
            self.urls if count is None else count,
            start=start,
            maintenance=self.maintenance_window(start),
        )

    def steady_seconds(self, start: float, count: Optional[int] = None) -> float:
        """:func:`steady_duration` of ``count`` (default :attr:`urls`) requests from ``start``."""
        return steady_duration(
            self.limiter,
            self.urls if count is None else count,
            start=start,
            maintenance=self.maintenance_window(start),
        )


#: The one-way delay of a request on loopback, as the stated-reset scenarios model it: a real
#: server counts a request a little after it was sent, so a window a request opens opens off
#: the whole second, and its reset rounded up to a whole second is late (with no delay, every
#: window after the first would open on the second and be stated exactly).
LOOPBACK = 0.002


def standard_scenarios(scale: float = 1.0, urls: int = 300) -> Dict[str, Scenario]:
    """Build the standard scenarios, keyed by name.

    Args:
        scale: multiplies every window, period, maintenance and switch time and divides every
            rate, and scales the ``random`` range (e.g. ``0.1`` for a real-time demo with 6 s
            windows). The overstated ``constant`` (3600) and the ``on_200`` value stay as
            they are: those lies do not shrink with the window.
        urls: requests per scenario (5/3 of it for the three ~100-per-minute portals, half of
            it for the 12-per-minute one; the hourly quota is 2/5 of it).
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    if urls < 1:
        raise ValueError("urls must be at least 1")
    s = float(scale)
    high = max(1, round(120 * s))
    hourly_limit = max(1, (urls * 2) // 5)
    many = urls * 5 // 3  # the portals with ~100/min limits get 5 windows' worth too
    items = [
        Scenario(
            "fixed_truthful",
            "fixed window 40/60 s (documented 60), truthful delta-seconds",
            FixedWindow(40, 60 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "truthful_date",
            "fixed window 40/60 s, truthful IMF-fixdate",
            FixedWindow(40, 60 * s),
            "truthful_date",
            "truthful",
            urls,
        ),
        Scenario(
            "sliding_truthful",
            "sliding window 40/60 s, truthful delta-seconds",
            SlidingWindow(40, 60 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "leaky_truthful",
            "token bucket 1/s, burst 20, truthful delta-seconds",
            LeakyBucket(1.0 / s, 20),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "always_zero",
            "fixed window 12/60 s (documented 30), Retry-After: 0 on every 429",
            FixedWindow(12, 60 * s),
            "zero",
            "always_zero",
            max(1, urls // 2),
        ),
        Scenario(
            "constant_3600",
            "fixed window 60/60 s, Retry-After: 3600 on every 429",
            FixedWindow(60, 60 * s),
            "constant",
            "constant_overstated",
            urls,
        ),
        Scenario(
            "random",
            f"sliding window 100/60 s, Retry-After uniform in 0..{high} (seeded)",
            SlidingWindow(100, 60 * s),
            "random",
            "unreliable",
            many,
            random_range=(0, high),
        ),
        Scenario(
            "absent",
            "fixed window 100/60 s (documented: none), no Retry-After",
            FixedWindow(100, 60 * s),
            "absent",
            "absent",
            many,
        ),
        Scenario(
            "past_date",
            "fixed window 118/60 s (documented 120), an HTTP-date an hour in the past",
            FixedWindow(118, 60 * s),
            "past_date",
            "always_zero",
            many,
        ),
        Scenario(
            "garbage",
            "token bucket 1/s, burst 30, Retry-After cycling 'soon', '1.5', '30, 60', '-5'",
            LeakyBucket(1.0 / s, 30),
            "garbage",
            # Unusable values are treated as no header at all.
            "absent",
            urls,
        ),
        Scenario(
            "retry_after_on_200",
            "fixed window 40/60 s, truthful on 429 and Retry-After: 120 on every 200",
            FixedWindow(40, 60 * s),
            "on_200",
            "truthful",
            urls,
        ),
        Scenario(
            "maintenance_503",
            "fixed window 60/60 s, 503 maintenance from +30 s to +10.5 min (HTTP-date of end)",
            FixedWindow(60, 60 * s),
            "maintenance",
            "truthful",
            urls,
            maintenance=(30 * s, 630 * s),
        ),
        Scenario(
            "switch_to_3600",
            "fixed window 40/60 s, truthful until +30 s, then Retry-After: 3600",
            FixedWindow(40, 60 * s),
            "switch",
            "constant_overstated",
            urls,
            switch_after=30 * s,
        ),
        Scenario(
            "hourly_countdown",
            f"hourly quota {hourly_limit}/h (resets at the top of the hour), truthful countdown",
            HourlyQuota(hourly_limit, 3600 * s),
            "countdown",
            "truthful",
            urls,
            tags=("hourly",),
        ),
    ]
    return {scenario.name: scenario for scenario in items}


def extra_scenarios(scale: float = 1.0, urls: int = 300) -> Dict[str, Scenario]:
    """Build the scenarios the standard set lacks, keyed by name (names do not clash with
    :func:`standard_scenarios`):

    - fixed windows of 5 to 30 s with 20 to 100 requests each, under several headers, and
      of 45, 90 and 120 s (45 and 90 s are no round lengths, which the engine favours);
    - a crawl of at least 1,000 URLs;
    - stated resets rounded up to the next whole second, in ``X-RateLimit-*``, draft-6 and
      draft-7 fields sent on every answer (200s included), on 1 s windows where waiting for
      a late reset costs the most;
    - a sliding window with no header at all, and sliding window counters without a header
      that count refused requests too (HAProxy's), of 1 s, 10 s and a minute, and one of a
      minute that does not (``limits``');
    - fixed windows that start at the client's first request, not on the clock;
    - nginx ``limit_req``-like buckets at 10 r/s, without a burst and with ``burst=5``;
    - a bucket and a fixed window that also refuse one request in 200 at random (a host's
      load, other clients behind its limit), without a header.

    Args:
        scale: as for :func:`standard_scenarios` (windows times ``scale``, rates divided).
        urls: requests per scenario; the long crawl has ``max(1000, 4 * urls)``.
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    if urls < 1:
        raise ValueError("urls must be at least 1")
    s = float(scale)
    crawl = max(1000, 4 * urls)
    items = [
        Scenario(
            "fixed_5s_absent",
            "fixed window 20/5 s, no Retry-After",
            FixedWindow(20, 5 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "fixed_10s_truthful",
            "fixed window 50/10 s, truthful delta-seconds",
            FixedWindow(50, 10 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "fixed_15s_past_date",
            "fixed window 30/15 s, an HTTP-date an hour in the past",
            FixedWindow(30, 15 * s),
            "past_date",
            "always_zero",
            urls,
        ),
        Scenario(
            "fixed_20s_zero",
            "fixed window 60/20 s, Retry-After: 0 on every 429",
            FixedWindow(60, 20 * s),
            "zero",
            "always_zero",
            urls,
        ),
        Scenario(
            "fixed_30s_constant",
            "fixed window 100/30 s, Retry-After: 3600 on every 429",
            FixedWindow(100, 30 * s),
            "constant",
            "constant_overstated",
            urls,
        ),
        Scenario(
            "fixed_45s_past_date",
            "fixed window 50/45 s (no round length), an HTTP-date an hour in the past",
            FixedWindow(50, 45 * s),
            "past_date",
            "always_zero",
            urls,
        ),
        Scenario(
            "fixed_90s_absent",
            "fixed window 60/90 s (no round length), no Retry-After",
            FixedWindow(60, 90 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "fixed_120s_absent",
            "fixed window 100/120 s, no Retry-After",
            FixedWindow(100, 120 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "crawl_1000",
            f"a {crawl}-URL crawl of a fixed window 100/60 s, no Retry-After",
            FixedWindow(100, 60 * s),
            "absent",
            "absent",
            crawl,
        ),
        Scenario(
            "reset_xratelimit",
            "moving window 5/1 s, X-RateLimit-* on every answer (reset: epoch, rounded up), "
            "Retry-After rounded up",
            SlidingWindow(5, 1 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="x-ratelimit",
            latency=LOOPBACK,
        ),
        Scenario(
            "reset_xratelimit_first",
            "windows of 5/1 s from the first request, X-RateLimit-* on every answer (reset: "
            "epoch, rounded up), Retry-After rounded up: Flask-Limiter's defaults",
            FirstRequestWindow(5, 1 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="x-ratelimit",
            latency=LOOPBACK,
        ),
        Scenario(
            "reset_draft6",
            "windows of 5/1 s from the first request, draft-6 RateLimit-* on every answer "
            "(reset rounded up), Retry-After rounded up",
            FirstRequestWindow(5, 1 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="draft6",
            latency=LOOPBACK,
        ),
        Scenario(
            "reset_draft7",
            "windows of 5/1 s from the first request, draft-7 combined RateLimit on every "
            "answer (reset rounded up), no Retry-After",
            FirstRequestWindow(5, 1 * s),
            "absent",
            "absent",
            urls,
            rate_headers="draft7",
            latency=LOOPBACK,
        ),
        Scenario(
            "reset_sliding_counter",
            "a sliding window counter of 5/1 s (limits' and Flask-Limiter's: the last window's "
            "count weighed on this one's), X-RateLimit-* on every answer (reset: epoch, "
            "rounded up), Retry-After rounded up",
            SlidingWindowCounter(5, 1 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="x-ratelimit",
            latency=LOOPBACK,
        ),
        Scenario(
            "reset_sliding_counter_60s",
            "the same counter over a minute, 100/60 s (Flask-Limiter's sliding-window-counter "
            "with its headers on), X-RateLimit-* on every answer, Retry-After rounded up",
            SlidingWindowCounter(100, 60 * s),
            "truthful",
            "truthful",
            urls,
            rate_headers="x-ratelimit",
            latency=LOOPBACK,
        ),
        Scenario(
            "sliding_counter_counted",
            "a sliding window counter of 10/1 s on windows of the clock that counts refused "
            "requests too, 429 without a header (as HAProxy's http_req_rate(1s) counts, "
            "tracked before http-request deny)",
            SlidingWindowCounter(10, 1 * s),
            "absent",
            "absent",
            urls,
            latency=LOOPBACK,
            count_refused=True,
        ),
        Scenario(
            "sliding_counter_counted_10s",
            "a sliding window counter of 20/10 s on windows of the clock that counts refused "
            "requests too, 429 without a header (as HAProxy's http_req_rate(10s) counts, "
            "tracked before http-request deny)",
            SlidingWindowCounter(20, 10 * s),
            "absent",
            "absent",
            urls,
            latency=LOOPBACK,
            count_refused=True,
        ),
        Scenario(
            "sliding_counter_counted_60s",
            "a sliding window counter of 100/60 s on windows of the clock that counts refused "
            "requests too, 429 without a header (as HAProxy's http_req_rate(60s) counts, "
            "tracked before http-request deny)",
            SlidingWindowCounter(100, 60 * s),
            "absent",
            "absent",
            urls,
            latency=LOOPBACK,
            count_refused=True,
        ),
        Scenario(
            "sliding_counter_first_60s",
            "the same counter of 100/60 s with windows from the first request, not the clock, "
            "as HAProxy's are (its frequency counters start at the first event)",
            SlidingWindowCounter(100, 60 * s, from_first=True),
            "absent",
            "absent",
            urls,
            latency=LOOPBACK,
            count_refused=True,
        ),
        Scenario(
            "sliding_counter_60s",
            "a sliding window counter of 100/60 s on windows of the clock that does not count "
            "refused requests, no header (the limits library's, Flask-Limiter's with its "
            "headers off)",
            SlidingWindowCounter(100, 60 * s),
            "absent",
            "absent",
            urls,
            latency=LOOPBACK,
        ),
        Scenario(
            "sliding_absent",
            "sliding window 30/20 s, no header at all",
            SlidingWindow(30, 20 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "first_request_absent",
            "windows of 40/30 s that start at the first request, no Retry-After",
            FirstRequestWindow(40, 30 * s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "first_request_truthful",
            "windows of 20/10 s that start at the first request, truthful delta-seconds",
            FirstRequestWindow(20, 10 * s),
            "truthful",
            "truthful",
            urls,
        ),
        Scenario(
            "nginx_10rs",
            "nginx limit_req rate=10r/s nodelay (no burst), 429 without Retry-After",
            nginx_limit_req(10.0 / s),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "nginx_10rs_burst5",
            "nginx limit_req rate=10r/s burst=5 nodelay, 429 without Retry-After",
            nginx_limit_req(10.0 / s, 5),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "sporadic_bucket",
            "token bucket 5/s, burst 10, and one request in 200 refused at random, no Retry-After",
            Sporadic(0.005, TokenBucket(5.0 / s, 10)),
            "absent",
            "absent",
            urls,
        ),
        Scenario(
            "sporadic_window",
            "fixed window 100/60 s, and one request in 200 refused at random, no Retry-After",
            Sporadic(0.005, FixedWindow(100, 60 * s)),
            "absent",
            "absent",
            urls,
        ),
    ]
    return {scenario.name: scenario for scenario in items}


_SCENARIOS: Dict[str, Scenario] = {}


def __getattr__(name: str) -> Dict[str, Scenario]:
    """:data:`SCENARIOS`, the standard scenarios at full scale (:func:`standard_scenarios`
    with defaults), built on first use rather than when the module is imported."""
    if name == "SCENARIOS":
        if not _SCENARIOS:
            _SCENARIOS.update(standard_scenarios())
        return _SCENARIOS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
