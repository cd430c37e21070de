#!/usr/bin/env python
"""Crawl every standard lying portal with RetryAfterAdapter and with urllib3's Retry.

    python benchmarks/bench_portals.py [--quick] [--json FILE] [--only NAME ...]
    python benchmarks/bench_portals.py --seeds N [--extra] [--jobs J]
    python benchmarks/bench_portals.py --sweep [--full]     # 20 seeds, every scenario
    python benchmarks/bench_portals.py --sweep --ticking    # on a clock that moves

Each scenario of :func:`scenarios.standard_scenarios` (benchmarks/scenarios.py) is served
over real HTTP on 127.0.0.1 and runs on virtual time: one FakeClock is shared by the portal
and the client, so the client's sleeps move the portal's time and an hour of rate limiting
costs nothing. Three runs per scenario, each against a fresh portal:

- ``urllib3 Retry``: ``Retry(total=5, backoff_factor=0.5, status_forcelist=[429, 503])`` on a
  plain HTTPAdapter. Only its sleeps are patched (and its HTTP-dates resolved on the virtual
  clock, since urllib3 resolves them against ``time.time()``); a 3600 s header costs 3600
  virtual seconds, as it would for real.
- ``adapter run 1``: RetryAfterAdapter with default settings (environment ignored, jitter
  seeded) and an empty in-memory store.
- ``adapter run 2``: a new adapter on the store run 1 left (same host key, a day later, the
  same time of day), as tomorrow's job would start.

With ``--seeds N`` each scenario's two adapter runs are repeated over N seeds and start
phases spread over its window, and the targets are judged on the 10th percentile of the
rates (run 2 also seed by seed against run 1). ``--extra`` adds
:func:`scenarios.extra_scenarios`; ``--sweep`` is every scenario over 20
seeds at ``--quick`` sizes on 2 worker processes, with the compact table only.

A FakeClock stands still between two readings: a request reserved and then sent goes at the
very moment of its reservation, which a real clock never does (a defect of a run's opening
passed every sweep for that, and showed on a real HAProxy). ``--ticking`` runs every crawl
on a clock that moves on a microsecond at each reading of its monotonic time.

The targets are reported, not asserted. See benchmarks/README.md for the columns.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import email.utils
import json
import math
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Type

import requests
import urllib3
from requests.adapters import HTTPAdapter

# benchmarks/scenarios.py, found because a script's directory comes first on sys.path.
from scenarios import Hit, Scenario, extra_scenarios, standard_scenarios
from urllib3.exceptions import InvalidHeader
from urllib3.util.retry import Retry

from requests_retryafter.clock import FakeClock, TickingClock

try:
    from requests_retryafter import (
        HostHeld,
        MemoryStore,
        RetryAfterAdapter,
        RetryDeadlineExceeded,
    )
except ImportError:  # the adapter has not landed: run the baseline only
    RetryAfterAdapter = None  # type: ignore[assignment,misc]
    from requests_retryafter.errors import HostHeld, RetryDeadlineExceeded
    from requests_retryafter.stores import MemoryStore

#: Virtual start: 2023-11-14 22:13:20 UTC (20 s into a minute, 800 s into an hour).
START = 1_700_000_000.0
DAY = 86_400.0
#: Virtual time one run may take before it is cut off.
VIRTUAL_CAP = 6 * 3600.0
#: Failed attempts (a RetryError or another request error) before a URL is given up.
MAX_FAILURES_PER_URL = 10

BASELINE = "urllib3 Retry"
RUN1 = "adapter run 1"
RUN2 = "adapter run 2"

#: Targets for the adapter (reported, not asserted).
RATE_TARGET = {RUN1: 0.85, RUN2: 0.93}
#: Run 2 may be at most this much below run 1 (its p10 below run 1's, and seed by seed).
MAX_RUN2_DROP = 0.02
MIN_GAP = 1.0
MAX_SLEEP = 300.0
MAX_REJECTION_SHARE = 0.02


# -- the baseline ------------------------------------------------------------------------------


#: The clock every crawl runs on (``TickingClock`` with ``--ticking``; set before the
#: worker processes fork, which inherit it).
CLOCK: Type[FakeClock] = FakeClock


def virtual_retry(clock: FakeClock) -> Retry:
    """urllib3's ``Retry(total=5, backoff_factor=0.5, status_forcelist=[429, 503])`` whose
    sleeps advance ``clock`` (recorded in ``clock.sleeps``) instead of ``time.sleep``.
    Everything else, Retry-After handling included, is urllib3's own."""

    class VirtualRetry(Retry):
        def sleep_for_retry(self, response: Any) -> bool:
            retry_after = self.get_retry_after(response)
            if retry_after:
                clock.sleep(retry_after)
                return True
            return False

        def _sleep_backoff(self) -> None:
            backoff = self.get_backoff_time()
            if backoff > 0:
                clock.sleep(backoff)

        def parse_retry_after(self, retry_after: str) -> float:
            # urllib3's code, with dates resolved against the virtual clock.
            seconds: float
            if re.match(r"^\s*[0-9]+\s*$", retry_after):
                seconds = int(retry_after)
            else:
                parsed = email.utils.parsedate_tz(retry_after)
                if parsed is None:
                    raise InvalidHeader(f"Invalid Retry-After header: {retry_after}")
                seconds = email.utils.mktime_tz(parsed) - clock.time()
            seconds = max(seconds, 0)
            ceiling = getattr(self, "retry_after_max", None)  # urllib3 >= 2.6
            if ceiling is not None:
                seconds = min(seconds, ceiling)
            return seconds

    return VirtualRetry(total=5, backoff_factor=0.5, status_forcelist=[429, 503])


def baseline_session(clock: FakeClock) -> requests.Session:
    session = requests.Session()
    session.mount("http://", HTTPAdapter(max_retries=virtual_retry(clock)))
    return session


def adapter_session(clock: FakeClock, store: Any, seed: int = 0) -> requests.Session:
    assert RetryAfterAdapter is not None
    session = requests.Session()
    adapter = RetryAfterAdapter(clock=clock, store=store, environ={}, seed=seed)
    session.mount("http://", adapter)
    return session


# -- the crawler -------------------------------------------------------------------------------


@dataclass
class Crawl:
    ok: int = 0
    gave_up: int = 0
    unfinished: int = 0
    held: int = 0
    held_seconds: float = 0.0
    deadline_waits: int = 0
    deadline_wait_seconds: float = 0.0
    errors: Dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0


def crawl(session: requests.Session, base_url: str, urls: int, clock: FakeClock) -> Crawl:
    """Fetch ``urls`` URLs one at a time, as a scheduler would.

    HostHeld: wait (advance the clock) until the hold ends, then retry the same URL.
    RetryDeadlineExceeded: count a failure, put the URL at the back and wait the ``delay`` the
    adapter says the host needs (the adapter raised instead of sleeping; a scheduler comes
    back to a one-host queue after that long, and without waiting the virtual clock would not
    move). Any other request error: count a failure and put the URL at the back. A URL is
    given up after :data:`MAX_FAILURES_PER_URL` failures. The run stops after
    :data:`VIRTUAL_CAP` virtual seconds or 50 attempts per URL.
    """
    result = Crawl()
    pending: Deque[int] = collections.deque(range(urls))
    failures: Dict[int, int] = collections.defaultdict(int)
    start = clock.time()
    budget = 50 * urls
    while pending and budget > 0 and clock.time() - start < VIRTUAL_CAP:
        budget -= 1
        index = pending.popleft()
        try:
            response = session.get(f"{base_url}/records/{index}?page=1", timeout=30)
        except HostHeld as exc:
            result.held += 1
            wait = max(0.0, exc.until - clock.time())
            result.held_seconds += wait
            clock.advance(wait)
            pending.appendleft(index)
            continue
        except RetryDeadlineExceeded as exc:
            error = type(exc).__name__
            result.deadline_waits += 1
            result.deadline_wait_seconds += max(0.0, exc.delay)
            clock.advance(max(0.0, exc.delay))
        except requests.RequestException as exc:
            error = type(exc).__name__
        else:
            if response.status_code == 200:
                result.ok += 1
                continue
            error = f"HTTP {response.status_code}"
        result.errors[error] = result.errors.get(error, 0) + 1
        failures[index] += 1
        if failures[index] < MAX_FAILURES_PER_URL:
            pending.append(index)
        else:
            result.gave_up += 1
    result.unfinished = len(pending)
    result.elapsed = clock.time() - start
    return result


# -- one run -----------------------------------------------------------------------------------


@dataclass
class Run:
    scenario: str
    client: str
    urls: int
    ok: int
    gave_up: int
    unfinished: int
    wire: int
    rejected: int
    virtual_s: float
    ideal_s: float
    steady_s: float
    rate: Optional[float]
    rate_steady: Optional[float]
    max_sleep_s: float
    sleeps: int
    after_rejection_lt_1s: int
    held: int
    held_s: float
    deadline_waits: int
    deadline_wait_s: float
    before_reset: Optional[int]
    errors: Dict[str, int]
    wall_s: float
    targets: Dict[str, bool] = field(default_factory=dict)
    misses: List[str] = field(default_factory=list)


def requests_before_reset(hits: List[Hit], period: float) -> int:
    """The most requests that reached the portal after a quota period's first rejection and
    before its reset, over the periods (issue #10: a quota must be held after at most two
    rejections, so at most one such request)."""
    counts: Dict[int, int] = {}
    rejected_in: Optional[int] = None
    for hit in hits:
        index = math.floor(hit.time / period + 1e-9)
        if rejected_in == index:
            counts[index] = counts.get(index, 0) + 1
        if hit.rejected and rejected_in != index:
            rejected_in = index
    return max(counts.values(), default=0)


def run_once(
    scenario: Scenario,
    client: str,
    make_session: Callable[[FakeClock], requests.Session],
    *,
    start: float,
    port: int = 0,
) -> Tuple[Run, int]:
    clock = CLOCK(start=start)
    portal = scenario.build(clock, port=port)
    wall = time.perf_counter()
    with portal:
        used_port = portal.port
        session = make_session(clock)
        try:
            result = crawl(session, portal.url, scenario.urls, clock)
        finally:
            session.close()
    wall = time.perf_counter() - wall
    stats = portal.stats
    complete = result.ok == scenario.urls
    ideal = scenario.ideal_seconds(start)
    steady = scenario.steady_seconds(start)
    rate = steady_rate = None  # meaningless when URLs are missing
    if complete:
        rate = ideal / result.elapsed if result.elapsed > 0 else 1.0
        steady_rate = steady / result.elapsed if result.elapsed > 0 else 1.0
    hourly = "hourly" in scenario.tags
    window = getattr(scenario.limiter, "window", 3600.0)
    run = Run(
        scenario=scenario.name,
        client=client,
        urls=scenario.urls,
        ok=result.ok,
        gave_up=result.gave_up,
        unfinished=result.unfinished,
        wire=stats.requests,
        rejected=stats.rejected,
        virtual_s=round(result.elapsed, 3),
        ideal_s=round(ideal, 3),
        steady_s=round(steady, 3),
        rate=None if rate is None else round(rate, 4),
        rate_steady=None if steady_rate is None else round(steady_rate, 4),
        max_sleep_s=round(max(clock.sleeps, default=0.0), 3),
        sleeps=len(clock.sleeps),
        after_rejection_lt_1s=stats.requests_after_rejection(MIN_GAP),
        held=result.held,
        held_s=round(result.held_seconds, 3),
        deadline_waits=result.deadline_waits,
        deadline_wait_s=round(result.deadline_wait_seconds, 3),
        before_reset=requests_before_reset(stats.hits, window) if hourly else None,
        errors=result.errors,
        wall_s=round(wall, 3),
    )
    if client in RATE_TARGET:
        judge(run, scenario)
    return run, used_port


def judge(run: Run, scenario: Scenario) -> None:
    """Fill ``run.targets`` (name -> met) and ``run.misses`` (by how much)."""
    target = RATE_TARGET[run.client]
    run.targets["rate"] = run.rate is not None and run.rate >= target
    if run.rate is None:
        run.misses.append(f"only {run.ok}/{run.urls} URLs fetched")
    elif run.rate < target:
        run.misses.append(f"rate {run.rate:.2f} < {target:.2f}")
    run.targets["gap"] = run.after_rejection_lt_1s == 0
    if not run.targets["gap"]:
        run.misses.append(f"{run.after_rejection_lt_1s} requests < 1 s after a rejection")
    run.targets["sleep"] = run.max_sleep_s <= MAX_SLEEP
    if not run.targets["sleep"]:
        run.misses.append(f"a {run.max_sleep_s:.0f} s sleep > {MAX_SLEEP:.0f} s")
    if run.client == RUN2:
        share = run.rejected / run.ok if run.ok else math.inf
        run.targets["rejections"] = share <= MAX_REJECTION_SHARE
        if not run.targets["rejections"]:
            run.misses.append(f"rejections {share:.1%} of successes > 2%")
    if run.before_reset is not None:
        run.targets["hold"] = run.before_reset <= 1
        if not run.targets["hold"]:
            run.misses.append(
                f"{run.before_reset} requests after a rejection before the reset (at most 1)"
            )


def run_scenario(
    scenario: Scenario, *, baseline: bool, start: float = START, seed: int = 0
) -> List[Run]:
    runs: List[Run] = []
    if baseline:
        runs.append(run_once(scenario, BASELINE, baseline_session, start=start)[0])
    if RetryAfterAdapter is None:
        return runs
    store = MemoryStore()
    first, port = run_once(scenario, RUN1, lambda c: adapter_session(c, store, seed), start=start)
    runs.append(first)
    # Tomorrow, same time of day (so the same ideal), same host key (same port), same store.
    days = max(1, math.ceil((first.virtual_s + 1) / DAY))
    runs.append(
        run_once(
            scenario,
            RUN2,
            lambda c: adapter_session(c, store, seed),
            start=start + days * DAY,
            port=port,
        )[0]
    )
    return runs


# -- reporting ---------------------------------------------------------------------------------


def _ratio(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mark(run: Run, name: str) -> str:
    if name not in run.targets:
        return ""
    return "PASS" if run.targets[name] else "FAIL"


def markdown(runs: List[Run]) -> str:
    header = (
        "| scenario | client | ok | wire | rejected | virtual s | ideal s | rate | steady s "
        "| rate (steady) | max sleep s "
        "| <1 s after 429 | held | rate target | no retry <1 s | sleep <=300 s | rej <2% "
        "| hold to reset |"
    )
    lines = [header, header_rule(header)]
    for r in runs:
        ok = f"{r.ok}/{r.urls}"
        lines.append(
            f"| {r.scenario} | {r.client} | {ok} | {r.wire} | {r.rejected} "
            f"| {r.virtual_s:.0f} | {r.ideal_s:.0f} | {_ratio(r.rate)} | {r.steady_s:.0f} "
            f"| {_ratio(r.rate_steady)} | {r.max_sleep_s:.0f} "
            f"| {r.after_rejection_lt_1s} | {r.held} | {_mark(r, 'rate')} | {_mark(r, 'gap')} "
            f"| {_mark(r, 'sleep')} | {_mark(r, 'rejections')} | {_mark(r, 'hold')} |"
        )
    return "\n".join(lines)


def header_rule(header: str) -> str:
    return "|" + "---|" * (header.count("|") - 1)


def summary(runs: List[Run]) -> str:
    judged = [r for r in runs if r.targets]
    if not judged:
        return "RetryAfterAdapter not available: baseline only."
    total = sum(len(r.targets) for r in judged)
    met = sum(sum(r.targets.values()) for r in judged)
    lines = [f"Adapter targets met: {met}/{total}."]
    for r in judged:
        if r.misses:
            lines.append(f"- {r.scenario}, {r.client}: " + "; ".join(r.misses))
    return "\n".join(lines)


#: ``--seeds``: repetition ``i`` starts ``frac(i * GOLDEN) * period`` seconds after START,
#: where ``period`` is the scenario's window (a bucket's refill time), so N start phases are
#: spread evenly over the window; the portal and the adapter are seeded with ``i``.
#: Repetition 0 starts at START with seed 0 (the main table).
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
#: The sweep's default number of seeds and start phases.
SWEEP_SEEDS = 20
#: The percentile the targets are judged on (nearest rank: the 2nd lowest of 20).
PERCENTILE = 10


def phase_start(scenario: Scenario, index: int) -> float:
    """The virtual start of repetition ``index`` of ``scenario`` (START for 0)."""
    return START + ((index * GOLDEN) % 1.0) * scenario.period


def percentile(values: List[float], pct: float) -> float:
    """Nearest-rank percentile of ``values`` (``pct`` 10: the 2nd lowest of 20, the lowest
    of up to 10). NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _median(values: List[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    return float(statistics.median(values))


def _rate(run: Run) -> float:
    """A run's rate, 0 when not every URL was fetched."""
    return run.rate if run.rate is not None else 0.0


def _refusal_share(run: Run) -> float:
    return run.rejected / run.ok if run.ok else 1.0


def _task(job: Tuple[Scenario, int, bool]) -> Tuple[str, int, List[Run]]:
    """Repetition ``index`` of a scenario: [baseline], run 1, run 2 (a worker's unit)."""
    scenario, index, baseline = job
    varied = dataclasses.replace(scenario, seed=index) if index else scenario
    runs = run_scenario(varied, baseline=baseline, start=phase_start(scenario, index), seed=index)
    return scenario.name, index, runs


def run_all(
    scenarios: List[Scenario], seeds: int, *, baseline: bool, jobs: int
) -> Dict[str, List[List[Run]]]:
    """Every repetition of every scenario (the urllib3 baseline in repetition 0 only), on
    ``jobs`` worker processes; per scenario, the runs of each repetition in order."""
    work = [(sc, i, baseline and i == 0) for sc in scenarios for i in range(seeds)]
    # The longest crawls first, so the workers finish together.
    work.sort(key=lambda job: -job[0].urls)
    results: Dict[str, List[List[Run]]] = {sc.name: [[] for _ in range(seeds)] for sc in scenarios}
    if jobs > 1 and len(work) > 1:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        with context.Pool(jobs) as pool:
            for name, index, runs in pool.imap_unordered(_task, work):
                results[name][index] = runs
    else:
        for job in work:
            name, index, runs = _task(job)
            results[name][index] = runs
    return results


@dataclass
class Spread:
    """One scenario over every seed and start phase: the adapter's rates and the targets
    judged on their 10th percentile."""

    scenario: str
    seeds: int
    run1_min: float
    run1_p10: float
    run1_median: float
    run2_min: float
    run2_p10: float
    run2_median: float
    #: The largest drop of run 2 below run 1 of the same seed (negative: run 2 was faster).
    run2_drop_max: float
    #: Seeds whose run 2 fell more than MAX_RUN2_DROP below their run 1.
    run2_drop_seeds: int
    #: Run 2's refusals as a share of its successes: 90th percentile and worst seed.
    run2_refused_p90: float
    run2_refused_max: float
    hot_loops: int
    max_sleep_s: float
    incomplete: int
    targets: Dict[str, bool] = field(default_factory=dict)
    misses: List[str] = field(default_factory=list)


def spread(name: str, reps: List[List[Run]]) -> Spread:
    """Judge ``name`` over its repetitions (each: [baseline], run 1, run 2)."""
    ones = [r for runs in reps for r in runs if r.client == RUN1]
    twos = [r for runs in reps for r in runs if r.client == RUN2]
    r1 = [_rate(r) for r in ones]
    r2 = [_rate(r) for r in twos]
    drops = [a - b for a, b in zip(r1, r2)]
    refused = [_refusal_share(r) for r in twos]
    result = Spread(
        scenario=name,
        seeds=len(ones),
        run1_min=min(r1),
        run1_p10=percentile(r1, PERCENTILE),
        run1_median=_median(r1),
        run2_min=min(r2),
        run2_p10=percentile(r2, PERCENTILE),
        run2_median=_median(r2),
        run2_drop_max=max(drops),
        run2_drop_seeds=sum(1 for d in drops if d > MAX_RUN2_DROP + 1e-9),
        run2_refused_p90=percentile(refused, 100 - PERCENTILE),
        run2_refused_max=max(refused),
        hot_loops=sum(r.after_rejection_lt_1s for r in ones + twos),
        max_sleep_s=max(r.max_sleep_s for r in ones + twos),
        incomplete=sum(1 for r in ones + twos if r.rate is None),
    )
    t, m = result.targets, result.misses
    t["run1 rate"] = result.run1_p10 >= RATE_TARGET[RUN1]
    if not t["run1 rate"]:
        m.append(f"run 1 p10 {result.run1_p10:.2f} < {RATE_TARGET[RUN1]:.2f}")
    t["run2 rate"] = result.run2_p10 >= RATE_TARGET[RUN2]
    if not t["run2 rate"]:
        m.append(f"run 2 p10 {result.run2_p10:.2f} < {RATE_TARGET[RUN2]:.2f}")
    t["run2 >= run1"] = (
        result.run2_p10 >= result.run1_p10 - MAX_RUN2_DROP - 1e-9 and not result.run2_drop_seeds
    )
    if result.run2_p10 < result.run1_p10 - MAX_RUN2_DROP - 1e-9:
        m.append(f"run 2 p10 {result.run2_p10:.2f} < run 1 p10 {result.run1_p10:.2f} - 0.02")
    if result.run2_drop_seeds:
        m.append(
            f"run 2 more than 0.02 below run 1 on {result.run2_drop_seeds}/{result.seeds} "
            f"seeds (worst {result.run2_drop_max:+.2f})"
        )
    t["refusals"] = result.run2_refused_p90 <= MAX_REJECTION_SHARE
    if not t["refusals"]:
        m.append(f"run 2 refusals p90 {result.run2_refused_p90:.1%} of successes > 2%")
    t["no hot loop"] = result.hot_loops == 0
    if not t["no hot loop"]:
        m.append(f"{result.hot_loops} requests < 1 s after a 429")
    t["sleep <= 300 s"] = result.max_sleep_s <= MAX_SLEEP
    if not t["sleep <= 300 s"]:
        m.append(f"a {result.max_sleep_s:.0f} s sleep")
    if result.incomplete:
        m.append(f"{result.incomplete} runs did not fetch every URL (rate counted as 0)")
    hold = [r for r in ones + twos if r.before_reset is not None]
    if hold:
        t["hold to reset"] = all((r.before_reset or 0) <= 1 for r in hold)
        if not t["hold to reset"]:
            m.append("requests after a rejection before the quota's reset")
    return result


def spread_table(spreads: List[Spread]) -> str:
    """The compact per-scenario table: rates over every seed, the worst figures, verdicts."""
    header = (
        "| scenario | run 1 min / p10 / median | run 2 min / p10 / median | run 2 drop max "
        "| run 2 refused p90 / max | <1 s after 429 | max sleep s | missed |"
    )
    lines = [header, header_rule(header)]
    for sp in spreads:
        missed = ", ".join(k for k, ok in sp.targets.items() if not ok) or "-"
        lines.append(
            f"| {sp.scenario} | {sp.run1_min:.2f} / {sp.run1_p10:.2f} / {sp.run1_median:.2f} "
            f"| {sp.run2_min:.2f} / {sp.run2_p10:.2f} / {sp.run2_median:.2f} "
            f"| {sp.run2_drop_max:+.2f} | {sp.run2_refused_p90:.1%} / {sp.run2_refused_max:.1%} "
            f"| {sp.hot_loops} | {sp.max_sleep_s:.0f} | {missed} |"
        )
    return "\n".join(lines)


def spread_summary(spreads: List[Spread]) -> str:
    """How many scenarios met every target, then each miss."""
    clean = sum(1 for sp in spreads if all(sp.targets.values()))
    met = sum(sum(sp.targets.values()) for sp in spreads)
    total = sum(len(sp.targets) for sp in spreads)
    lines = [
        f"Scenarios meeting every target: {clean}/{len(spreads)} "
        f"(targets met: {met}/{total}, judged on the p{PERCENTILE} over seeds and phases)."
    ]
    for sp in spreads:
        if sp.misses:
            lines.append(f"- {sp.scenario}: " + "; ".join(sp.misses))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 URLs per host, not 300")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--only", metavar="NAME", action="append", help="run this scenario")
    parser.add_argument("--no-baseline", action="store_true", help="skip urllib3 Retry")
    parser.add_argument(
        "--extra", action="store_true", help="add scenarios.extra_scenarios() to the set"
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help=f"every scenario (--extra), --seeds {SWEEP_SEEDS} unless given, --quick sizes "
        "unless --full, no baseline, and only the per-scenario table",
    )
    parser.add_argument(
        "--full", action="store_true", help="with --sweep: 300 URLs a portal, not 100"
    )
    parser.add_argument(
        "--ticking",
        action="store_true",
        help="run on a clock that moves on a microsecond at each reading (a FakeClock "
        "stands still between a reservation and its send)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="N",
        help="run each scenario's adapter runs over N seeds and start phases spread over "
        f"its window, and judge the targets on the p{PERCENTILE} (default 1; "
        f"{SWEEP_SEEDS} with --sweep)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        metavar="J",
        help="worker processes (default 2; 1 runs everything in this process)",
    )
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = TickingClock if args.ticking else FakeClock
    seeds = args.seeds if args.seeds is not None else (SWEEP_SEEDS if args.sweep else 1)
    if seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    quick = args.quick or (args.sweep and not args.full)
    size = 100 if quick else 300
    scenarios = standard_scenarios(urls=size)
    if args.extra or args.sweep:
        scenarios.update(extra_scenarios(urls=size))
    else:
        # --only may name an extra scenario without --extra.
        extras = extra_scenarios(urls=size)
        scenarios.update({n: extras[n] for n in args.only or () if n in extras})
    names = args.only or list(scenarios)
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(scenarios)}")
    baseline = not (args.no_baseline or args.sweep)
    if RetryAfterAdapter is None:
        print("RetryAfterAdapter not importable: running the urllib3 baseline only.")
        seeds = 1

    began = time.perf_counter()
    results = run_all([scenarios[n] for n in names], seeds, baseline=baseline, jobs=args.jobs)
    wall = time.perf_counter() - began
    runs = [r for n in names for r in results[n][0]]
    for name in names:
        walls = sum(r.wall_s for reps in results[name] for r in reps)
        print(f"{name}: {scenarios[name].description} [{walls:.1f} s]", file=sys.stderr)

    if not args.sweep:
        print(markdown(runs))
        print()
        print(summary(runs))
    spreads: List[Spread] = []
    if seeds > 1 and RetryAfterAdapter is not None:
        spreads = [spread(n, results[n]) for n in names]
        print(
            f"\nAcross {seeds} seeds and start phases (targets on the p{PERCENTILE}; "
            f"{size} URLs a portal):\n"
        )
        print(spread_table(spreads))
        print()
        print(spread_summary(spreads))
    print(f"\nWall time: {wall:.1f} s ({args.jobs} worker processes).")
    if args.json:
        document = {
            "benchmark": "bench_portals",
            "quick": quick,
            "ticking": args.ticking,
            "start": START,
            "virtual_cap_s": VIRTUAL_CAP,
            "max_failures_per_url": MAX_FAILURES_PER_URL,
            "python": platform.python_version(),
            "requests": requests.__version__,
            "urllib3": urllib3.__version__,
            "wall_s": round(wall, 3),
            "jobs": args.jobs,
            "scenarios": {
                n: {
                    "description": scenarios[n].description,
                    "kind": scenarios[n].kind,
                    "urls": scenarios[n].urls,
                    "period_s": scenarios[n].period,
                }
                for n in names
            },
            "runs": [dataclasses.asdict(r) for r in runs],
            "seeds": seeds,
            "percentile": PERCENTILE,
            "repeats": {
                n: [
                    [dataclasses.asdict(r) for r in reps if r.client in RATE_TARGET]
                    for reps in results[n][1:]
                ]
                for n in names
                if seeds > 1
            },
            "spread": {sp.scenario: dataclasses.asdict(sp) for sp in spreads},
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
