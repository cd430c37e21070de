#!/usr/bin/env python
"""Crawl every standard lying portal with RetryAfterAdapter and with urllib3's Retry.

    python benchmarks/bench_portals.py [--quick] [--json FILE] [--only NAME ...]

Each scenario of :func:`requests_retryafter.simulator.standard_scenarios` is served over real
HTTP on 127.0.0.1 and runs on virtual time: one FakeClock is shared by the portal and the
client, so the client's sleeps move the portal's time and an hour of rate limiting costs
nothing. Three runs per scenario, each against a fresh portal:

- ``urllib3 Retry``: ``Retry(total=5, backoff_factor=0.5, status_forcelist=[429, 503])`` on a
  plain HTTPAdapter. Only its sleeps are patched (and its HTTP-dates resolved on the virtual
  clock, since urllib3 resolves them against ``time.time()``); a 3600 s header costs 3600
  virtual seconds, as it would for real.
- ``adapter run 1``: RetryAfterAdapter with default settings (environment ignored, jitter
  seeded) and an empty in-memory store.
- ``adapter run 2``: a new adapter on the store run 1 left (same host key, a day later, the
  same time of day), as tomorrow's job would start.

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
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.exceptions import InvalidHeader
from urllib3.util.retry import Retry

from requests_retryafter.clock import FakeClock
from requests_retryafter.simulator import Hit, Scenario, standard_scenarios

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
RATE_TARGET = {RUN1: 0.85, RUN2: 0.95}
MIN_GAP = 1.0
MAX_SLEEP = 300.0
MAX_REJECTION_SHARE = 0.02


# -- the baseline ------------------------------------------------------------------------------


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
    """Requests that reached the portal after a rejection and before the quota's next reset."""
    count = 0
    rejected_in: Optional[int] = None
    for hit in hits:
        index = math.floor(hit.time / period + 1e-9)
        if rejected_in == index:
            count += 1
        if hit.rejected and rejected_in != index:
            rejected_in = index
    return count


def run_once(
    scenario: Scenario,
    client: str,
    make_session: Callable[[FakeClock], requests.Session],
    *,
    start: float,
    port: int = 0,
) -> Tuple[Run, int]:
    clock = FakeClock(start=start)
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
        run.targets["rejections"] = share < MAX_REJECTION_SHARE
        if not run.targets["rejections"]:
            run.misses.append(f"rejections {share:.1%} of successes >= 2%")
    if run.before_reset is not None:
        run.targets["hold"] = run.before_reset == 0
        if not run.targets["hold"]:
            run.misses.append(f"{run.before_reset} requests after a rejection before the reset")


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


#: ``--seeds``: repetition ``i`` starts this many seconds times ``i`` later than START (so
#: 7.3 s further into a minute each time) and seeds the portal and the adapter with ``i``.
PHASE_STEP = 7.3


def repeat(scenario: Scenario, seeds: int) -> List[Tuple[Run, Run]]:
    """Runs 1 and 2 of ``scenario`` for repetitions 1 .. ``seeds - 1`` (0 is the main table)."""
    pairs = []
    for i in range(1, seeds):
        varied = dataclasses.replace(scenario, seed=i)
        first, second = run_scenario(varied, baseline=False, start=START + i * PHASE_STEP, seed=i)
        pairs.append((first, second))
    return pairs


def _rates(runs: List[Run]) -> List[float]:
    """Each run's rate, lowest first (an incomplete run counts as 0)."""
    return sorted(r.rate if r.rate is not None else 0.0 for r in runs)


def spread_table(main_runs: List[Run], repeats: Dict[str, List[Tuple[Run, Run]]]) -> str:
    """Per scenario, the adapter's rates and run 2's rejections across every repetition."""
    header = (
        "| scenario | run 1 rate min | run 1 rate median | run 2 rate min | run 2 rate median "
        "| run 2 rejected max | targets met |"
    )
    lines = [header, header_rule(header)]
    for name, pairs in repeats.items():
        own = [r for r in main_runs if r.scenario == name and r.client in RATE_TARGET]
        ones = [r for r in own if r.client == RUN1] + [a for a, _ in pairs]
        twos = [r for r in own if r.client == RUN2] + [b for _, b in pairs]

        r1, r2 = _rates(ones), _rates(twos)
        share = max((r.rejected / r.ok if r.ok else 1.0) for r in twos)
        judged = ones + twos
        met = sum(sum(r.targets.values()) for r in judged)
        total = sum(len(r.targets) for r in judged)
        lines.append(
            f"| {name} | {r1[0]:.2f} | {r1[len(r1) // 2]:.2f} | {r2[0]:.2f} "
            f"| {r2[len(r2) // 2]:.2f} | {share:.1%} | {met}/{total} |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 URLs per host, not 300")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--only", metavar="NAME", action="append", help="run this scenario")
    parser.add_argument("--no-baseline", action="store_true", help="skip urllib3 Retry")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="also repeat each scenario's adapter runs N-1 more times, each starting "
        f"{PHASE_STEP:g} s further into a minute with other seeds, and report the spread",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")

    scenarios = standard_scenarios(urls=100 if args.quick else 300)
    names = args.only or list(scenarios)
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(scenarios)}")
    if RetryAfterAdapter is None:
        print("RetryAfterAdapter not importable: running the urllib3 baseline only.")

    began = time.perf_counter()
    runs: List[Run] = []
    for name in names:
        scenario = scenarios[name]
        scenario_runs = run_scenario(scenario, baseline=not args.no_baseline)
        runs.extend(scenario_runs)
        walls = ", ".join(f"{r.client} {r.wall_s:.1f} s" for r in scenario_runs)
        print(f"{name}: {scenario.description} [{walls}]", file=sys.stderr)
    repeats: Dict[str, List[Tuple[Run, Run]]] = {}
    if args.seeds > 1 and RetryAfterAdapter is not None:
        for name in names:
            repeats[name] = repeat(scenarios[name], args.seeds)
    wall = time.perf_counter() - began

    print(markdown(runs))
    print()
    print(summary(runs))
    if repeats:
        every = runs + [r for pairs in repeats.values() for pair in pairs for r in pair]
        print(f"\nAcross {args.seeds} start phases and seeds (the table above is the first):\n")
        print(spread_table(runs, repeats))
        print()
        print(summary(every).replace("Adapter targets met", "Across them, adapter targets met"))
    print(f"\nWall time: {wall:.1f} s.")
    if args.json:
        document = {
            "benchmark": "bench_portals",
            "quick": args.quick,
            "start": START,
            "virtual_cap_s": VIRTUAL_CAP,
            "max_failures_per_url": MAX_FAILURES_PER_URL,
            "python": platform.python_version(),
            "requests": requests.__version__,
            "urllib3": urllib3.__version__,
            "wall_s": round(wall, 3),
            "scenarios": {
                n: {"description": scenarios[n].description, "kind": scenarios[n].kind}
                for n in names
            },
            "runs": [dataclasses.asdict(r) for r in runs],
            "seeds": args.seeds,
            "repeats": {
                n: [[dataclasses.asdict(a), dataclasses.asdict(b)] for a, b in pairs]
                for n, pairs in repeats.items()
            },
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
