"""``requests-retryafter demo``: crawl local portals that each use ``Retry-After`` their own
way, on virtual time, and show what the adapter learned about each.

The ``demo`` subcommand of :mod:`requests_retryafter.cli` calls :func:`run_demo`. Every run is
seeded (``--seed``, default 0), so that the same command prints the same summary; the
portals' fixed windows are put in the same phase by starting virtual time at a whole hour.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import re
import shutil
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any, Deque, Dict, List, Optional, Sequence, Tuple

import requests

from .adapter import RetryAfterAdapter
from .cli import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    CliError,
    _decisions_shown,
    _opened_store,
    _plural,
    _store_items,
    _use_rich,
    redact_url,
)
from .clock import FakeClock
from .decisions import Decision, Event
from .errors import HostHeld, RetryDeadlineExceeded, RetryLimitExceeded
from .report import format_epoch
from .state import host_key
from .stores import StateStore
from .testing import FixedWindow, Limiter, RateLimitedServer, SlidingWindow, TokenBucket

__all__ = ["DEMO_BEHAVIOURS", "DEMO_PORT_BASE", "run_demo"]

log = logging.getLogger(__name__)

#: Retry-After behaviours the demo shows, in order (one portal each).
DEMO_BEHAVIOURS = ("truthful", "zero", "constant", "random", "absent", "garbage", "on_200")
#: Ports the demo portals try first (so that a store kept with ``--store`` sees the same
#: hosts on the next run); a busy port falls back to any free one.
DEMO_PORT_BASE = 47301


class _DemoClock(FakeClock):
    """Virtual time shared by one portal and its client, with a little real delay per sleep
    so that the progress can be watched (``ratio`` real seconds per virtual second)."""

    def __init__(self, start: float, ratio: float) -> None:
        super().__init__(start)
        self.ratio = ratio

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.ratio > 0 and seconds > 0:
            time.sleep(min(seconds * self.ratio, 0.5))


@dataclass
class _HostRun:
    """One portal of the demo and what happened to it."""

    name: str
    description: str
    expected: str
    enforced: Optional[float]
    #: The portal's limiter (its ``limit`` and ``window``, when it has them).
    limiter: Any
    portal: Any
    clock: _DemoClock
    total: int
    url: str = ""
    host: str = ""
    ok: int = 0
    #: Calls that gave up (attempts or deadline used up) ...
    gave_up: int = 0
    #: ... and of those, how many were put back in the queue, and how many of the URLs put
    #: back were fetched later.
    requeued: int = 0
    recovered: int = 0
    #: URLs that failed for good (another error, or given up too often).
    failed: int = 0
    held: str = ""
    #: URLs not fetched because the host was held.
    left: int = 0
    done: bool = False
    #: The clock's monotonic time when the crawl started.
    origin: float = 0.0
    decisions: List[Decision] = field(default_factory=list)

    @property
    def attempted(self) -> int:
        """URLs finished: fetched, or failed for good."""
        return self.ok + self.failed

    def rejections(self) -> int:
        return int(self.portal.stats.rejected)

    def rate(self) -> str:
        """Requests answered 2xx per virtual minute so far, as text."""
        elapsed = self.clock.monotonic() - self.origin
        return f"{self.ok * 60.0 / elapsed:.1f}/min" if elapsed > 0 else "-"

    def category(self) -> str:
        """The category the adapter judged the host to be, as far as the run has seen."""
        for d in reversed(self.decisions):
            if d.event == Event.CATEGORY:
                return d.category
        return "unknown"


def _enforced_per_minute(limiter: Any) -> Optional[float]:
    """The limit a simulated portal enforces, in requests per minute, when it has one."""
    limit, window = getattr(limiter, "limit", None), getattr(limiter, "window", None)
    if isinstance(limit, (int, float)) and isinstance(window, (int, float)) and window > 0:
        return float(limit) * 60.0 / float(window)
    rate = getattr(limiter, "rate", None)
    if isinstance(rate, (int, float)):
        return float(rate) * 60.0
    return None


@dataclass(frozen=True)
class _DemoPortal:
    """One portal of the demo: a :class:`~requests_retryafter.testing.RateLimitedServer`
    recipe, and the category the adapter should judge its host to be."""

    name: str
    description: str
    #: A template: each :meth:`build` serves a fresh copy.
    limiter: Limiter
    #: How it sends ``Retry-After``, one of :data:`requests_retryafter.testing.BEHAVIOURS`.
    behaviour: str
    expected: str
    urls: int
    random_range: Tuple[int, int] = (0, 120)
    #: The limit the portal documents, as ``(requests, window in seconds)``, stated on every
    #: answer as ``RateLimit-Policy`` (right or wrong: the adapter keeps it as the documented
    #: figure and learns the enforced one); ``None`` when it documents none.
    documented: Optional[Tuple[int, int]] = None

    def build(self, clock: FakeClock, *, port: int = 0) -> RateLimitedServer:
        """A server (not yet started) for this portal on ``clock``, bound to ``port``."""
        portal = _DemoServer(
            self.limiter.fresh(),
            self.behaviour,
            clock=clock,
            name=self.name,
            random_range=self.random_range,
            seed=0,
            port=port,
        )
        if self.documented is not None:
            requests_per_window, window = self.documented
            portal.policy = f"{requests_per_window};w={window}"
        return portal


class _DemoServer(RateLimitedServer):
    """A demo portal: a :class:`~requests_retryafter.testing.RateLimitedServer` that states
    the limit it documents (:attr:`policy`, a ``RateLimit-Policy`` value such as ``60;w=60``)
    on every answer, whatever it enforces, as a portal whose documentation is wrong does."""

    #: The ``RateLimit-Policy`` sent on every answer; empty: none.
    policy: str = ""

    def _answer(self, method: str, path: str) -> Any:
        answer = super()._answer(method, path)
        if not self.policy:
            return answer
        headers = (*answer.headers, ("RateLimit-Policy", self.policy))
        return dataclasses.replace(answer, headers=headers)


def _demo_scenarios(urls: int) -> List[_DemoPortal]:
    """The demo's portals, one per way of using ``Retry-After`` (:data:`DEMO_BEHAVIOURS`, in
    order), with ``urls`` URLs each (5/3 of it for the two ~100-per-minute portals, half of it
    for the 12-per-minute one)."""
    many = urls * 5 // 3
    portals = [
        _DemoPortal(
            "fixed_truthful",
            "fixed window 40/60 s (documented 60), truthful delta-seconds",
            FixedWindow(40, 60),
            "truthful",
            "truthful",
            urls,
            documented=(60, 60),
        ),
        _DemoPortal(
            "always_zero",
            "fixed window 12/60 s (documented 30), Retry-After: 0 on every 429",
            FixedWindow(12, 60),
            "zero",
            "always_zero",
            max(1, urls // 2),
            documented=(30, 60),
        ),
        _DemoPortal(
            "constant_3600",
            "fixed window 60/60 s, Retry-After: 3600 on every 429",
            FixedWindow(60, 60),
            "constant",
            "constant_overstated",
            urls,
        ),
        _DemoPortal(
            "random",
            "sliding window 100/60 s, Retry-After uniform in 0..120 (seeded)",
            SlidingWindow(100, 60),
            "random",
            "unreliable",
            many,
            random_range=(0, 120),
        ),
        _DemoPortal(
            "absent",
            "fixed window 100/60 s (documented: none), no Retry-After",
            FixedWindow(100, 60),
            "absent",
            "absent",
            many,
        ),
        _DemoPortal(
            "garbage",
            "token bucket 1/s, burst 30, Retry-After cycling 'soon', '1.5', '30, 60', '-5'",
            TokenBucket(1.0, 30),
            "garbage",
            # Unusable values are treated as no header at all.
            "absent",
            urls,
        ),
        _DemoPortal(
            "retry_after_on_200",
            "fixed window 40/60 s, truthful on 429 and Retry-After: 120 on every 200",
            FixedWindow(40, 60),
            "on_200",
            "truthful",
            urls,
        ),
    ]
    return portals


def _start_portal(scenario: _DemoPortal, clock: FakeClock, port: int) -> RateLimitedServer:
    if port:
        portal = scenario.build(clock, port=port)
        try:
            portal.start()
        except OSError as exc:
            log.debug("demo: port %d unavailable (%s); using any free port", port, exc.errno)
        else:
            return portal
    portal = scenario.build(clock)
    portal.start()
    return portal


#: How often the demo's crawler puts a URL back at the end of its queue after a give-up, as a
#: job scheduler would, before it counts the URL as failed.
DEMO_REQUEUES = 3


def _crawl(run: _HostRun, store: StateStore, stop: threading.Event, seed: Optional[int]) -> None:
    """Fetch every URL of ``run``'s portal in order. A URL whose call gave up (its attempts or
    its deadline used up) goes back to the end of the queue, up to :data:`DEMO_REQUEUES`
    times; a held host ends the crawl (a scheduler would come back when the hold ends)."""
    adapter = RetryAfterAdapter(
        store=store, clock=run.clock, on_decision=run.decisions.append, seed=seed
    )
    queue: Deque[Tuple[int, int]] = deque((i, 0) for i in range(run.total))
    try:
        with requests.Session() as session:
            session.mount("http://", adapter)
            while queue:
                if stop.is_set():
                    break
                index, requeued = queue.popleft()
                try:
                    response = session.get(f"{run.url}/records/{index}", timeout=10)
                except HostHeld as exc:
                    run.held = f"held until {format_epoch(exc.until)}: {exc.reason}"
                    run.left = len(queue) + 1
                    break
                except (RetryLimitExceeded, RetryDeadlineExceeded):
                    run.gave_up += 1
                    if requeued < DEMO_REQUEUES:
                        run.requeued += 1
                        queue.append((index, requeued + 1))
                    else:
                        run.failed += 1
                    continue
                except requests.RequestException:
                    run.failed += 1
                    continue
                if response.ok:
                    run.ok += 1
                    if requeued:
                        run.recovered += 1
                else:
                    run.failed += 1
    finally:
        adapter.close()
        run.done = True


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width if total <= 0 else min(width, done * width // total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


class _PlainProgress:
    """Progress as plain text lines (no rich, or not a terminal)."""

    def __init__(self, runs: Sequence[_HostRun], store: StateStore, stream: IO[str]) -> None:
        self.runs, self.store, self.stream = runs, store, stream
        self.width = max(len(r.name) for r in runs)
        self.reported: Dict[str, bool] = {}
        self.last = time.monotonic()
        self.started = self.last

    def line(self, run: _HostRun) -> str:
        return (
            f"{run.name.ljust(self.width)} {_bar(run.attempted, run.total)} "
            f"{run.attempted:>4}/{run.total:<4} {run.rate():>10} "
            f"{run.rejections():>4} rejected  {run.category()}"
            + (("  held" if run.held else "  done") if run.done else "")
        )

    def update(self, *, final: bool = False) -> None:
        now = time.monotonic()
        periodic = now - self.last >= 2.0 and not final
        for run in self.runs:
            if self.reported.get(run.name):
                continue  # its last line was printed when it finished
            finished = run.done
            if periodic or finished:
                if finished:
                    self.reported[run.name] = True
                print(f"[{now - self.started:5.1f}s] {self.line(run)}", file=self.stream)
        if periodic:
            self.last = now
        self.stream.flush()

    def close(self) -> None:
        self.update(final=True)


class _RichProgress:  # pragma: no cover - drawn only on a terminal
    """Progress bars with rich: one per host, with its rate, rejections and category."""

    def __init__(self, runs: Sequence[_HostRun], store: StateStore, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.runs, self.store = runs, store
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>8}"),
            TextColumn("{task.fields[rejected]:>4} rejected"),
            TextColumn("{task.fields[category]}"),
            console=Console(file=stream),
        )
        width = max(len(r.name) for r in runs)
        self.tasks = {
            r.name: self.progress.add_task(
                r.name.ljust(width), total=r.total, rate="", rejected=0, category="unknown"
            )
            for r in runs
        }
        self.progress.start()

    def update(self) -> None:
        for run in self.runs:
            self.progress.update(
                self.tasks[run.name],
                completed=run.attempted if not run.done else run.total,
                rate=run.rate(),
                rejected=run.rejections(),
                category=run.category() + (" (held)" if run.held else ""),
            )

    def close(self) -> None:
        self.update()
        self.progress.stop()


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _waits_summary(decisions: Sequence[Decision], slept: float) -> List[str]:
    """Lines saying how long the client waited and why, grouped by reason.

    ``slept`` is the total actually slept (the clock's record); ``sleep`` decisions say what
    was decided after each rejection and why (grouped by their reason's wording, numbers
    aside), ``wait`` decisions with the code ``pacing`` are the waits for a paced slot.
    """
    lines = []
    sleeps = [d for d in decisions if d.event == Event.SLEEP]
    paced = [d for d in decisions if d.event == Event.WAIT and d.code == "pacing"]
    shared = [d for d in decisions if d.event == Event.WAIT and d.code == "shared_wait"]
    lines.append(
        f"{slept:.0f} s in all: {sum(d.wait for d in sleeps):.0f} s decided after "
        f"{_plural(len(sleeps), 'rejection')}, {sum(d.wait for d in paced):.0f} s in "
        f"{_plural(len(paced), 'pacing wait')}"
        + (
            f", {sum(d.wait for d in shared):.0f} s waiting for other calls' refusals"
            if shared
            else ""
        )
    )
    groups: Dict[str, List[Decision]] = {}
    for d in sleeps:
        groups.setdefault(_NUMBER.sub("N", d.reason), []).append(d)
    for group in sorted(groups.values(), key=lambda g: -len(g)):
        average = sum(d.wait for d in group) / len(group)
        varied = len({d.reason for d in group}) > 1
        lines.append(
            f"  {len(group):>3} x {average:6.1f} s avg  "
            + ("e.g. " if varied else "")
            + group[-1].reason
        )
    for event in (Event.HOLD, Event.GIVE_UP, Event.REFUSE, Event.IGNORE):
        chosen = [d for d in decisions if d.event == event]
        if chosen:
            label = event.value.replace("_", " ")
            lines.append(f"  {label} x {len(chosen)}: {chosen[-1].reason}")
    return lines


def _per_minute_text(rate: float) -> Optional[str]:
    """A rate per second as requests per minute with one decimal, ``None`` when not finite."""
    per_minute = rate * 60.0 if isinstance(rate, (int, float)) else math.nan
    return f"{per_minute:.1f}" if math.isfinite(per_minute) else None


def _demo_summary(runs: Sequence[_HostRun], store: StateStore, out: IO[str]) -> None:
    print("\nWhat was learned", file=out)
    print("================", file=out)
    for run in runs:
        state = store.get(run.host) if run.host else None
        print(f"\n{run.name} ({run.host}): {run.description}", file=out)
        category = state.category if state is not None else "unknown"
        verdict = "as expected" if category == run.expected else f"expected {run.expected}"
        print(f"  category:  {category} ({verdict})", file=out)
        if state is not None and state.evidence:
            print(f"  evidence:  {state.evidence}", file=out)
        limit = state.limit if state is not None else None
        per_minute = None if limit is None else _per_minute_text(limit.rate)
        learned = "none yet" if per_minute is None else f"{per_minute} requests/min"
        if limit is not None and limit.source == "stated":
            learned += " (stated by the host)"
        # The documented figure is what the host stated (RateLimit-Policy), right or wrong.
        documented = None if limit is None or limit.documented is None else limit.documented
        stated = None if documented is None else _per_minute_text(documented)
        notes = [] if run.enforced is None else [f"the portal enforces {run.enforced:.0f}"]
        if stated is not None:
            notes.append(f"documented {float(stated):g}")
        enforced = f" ({'; '.join(notes)})" if notes else ""
        above = limit is not None and _limit_above(limit.rate, run.enforced)
        print(f"  limit:     {learned}{enforced}{' *' if above else ''}", file=out)
        if above and limit is not None and state is not None:
            for line in _limit_note(limit, run, [rate for _, rate in state.limit_history]):
                print(f"             {line}", file=out)
        minutes = (run.clock.monotonic() - run.origin) / 60.0
        print(
            f"  traffic:   {run.ok} ok, {run.rejections()} rejected by the portal, "
            f"{run.failed} failed, in {minutes:.1f} virtual minutes",
            file=out,
        )
        if run.gave_up:
            print(
                f"  requeued:  {_plural(run.gave_up, 'call')} gave up (a budget used up); "
                f"the crawler put {_plural(run.requeued, 'URL')} back at the end of its "
                f"queue, as a scheduler would, and fetched {run.recovered} of them later",
                file=out,
            )
        if run.held:
            left = f"; {_plural(run.left, 'URL')} left for a later run" if run.left else ""
            print(f"  held:      {run.held}{left}", file=out)
        waits = _waits_summary(run.decisions, run.clock.slept)
        print(f"  waits:     {waits[0]}", file=out)
        for line in waits[1:]:
            print(f"           {line}", file=out)


def _limit_above(rate: float, enforced: Optional[float]) -> bool:
    """Whether a learned rate (per second) reads above the enforced limit (per minute)."""
    per_minute = rate * 60.0
    return enforced is not None and math.isfinite(per_minute) and per_minute > enforced + 0.05


def _limit_note(limit: Any, run: _HostRun, history: Sequence[float]) -> List[str]:
    """Why a learned limit reads above the one the portal enforces (marked ``*``)."""
    portal_limit = getattr(run.limiter, "limit", None)
    portal_window = getattr(run.limiter, "window", None)
    lines = ["* above the enforced limit:"]
    if limit.window and limit.burst and portal_limit == limit.burst and portal_window:
        lines.append(
            f"  the burst ({limit.burst} per window) is what the portal allows, but the "
            f"window reads {limit.window:.0f} s, not {float(portal_window):.0f} s:"
        )
    elif limit.window:
        lines.append(f"  the window reads {limit.window:.0f} s:")
    lines.append("  a window's end is seen only between a refusal and the next success, and the")
    lines.append("  first windows measured read short. Each later window measures it again")
    if len(history) > 1:
        shown = " -> ".join(f"{rate * 60.0:.0f}" for rate in history[-6:])
        lines.append(f"  (so far {shown}/min); until then the portal's refusals stop any excess.")
    else:
        lines.append("  (a longer run corrects it); until then the portal's refusals stop any")
        lines.append("  excess.")
    return lines


def _command() -> str:
    """How to type this command again, as the user can: ``requests-retryafter`` when that is
    on ``PATH`` (and is this one), else the path it was run by (``.venv/bin/...``), else
    ``python -m requests_retryafter`` with this interpreter."""
    candidates = []
    if sys.argv and os.path.basename(sys.argv[0]) == PROG:
        candidates.append(sys.argv[0])
    candidates.append(os.path.join(os.path.dirname(sys.executable), PROG))
    on_path = shutil.which(PROG)
    for candidate in candidates:
        if not os.path.isfile(candidate):
            continue
        if on_path and os.path.realpath(on_path) == os.path.realpath(candidate):
            return PROG
        return _short_path(candidate)
    return f"{_short_path(sys.executable)} -m requests_retryafter"


def _short_path(path: str) -> str:
    """``path`` relative to the working directory when it is below it, else as it is."""
    absolute = os.path.abspath(path)
    here = os.getcwd()
    if absolute.startswith(here + os.sep):
        return os.path.relpath(absolute, here)
    return path


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo with the ``demo`` subcommand's parsed arguments; return the exit status."""
    urls = args.urls if args.urls is not None else (120 if args.quick else 300)
    if urls < 1:
        raise CliError("demo: --urls must be at least 1", EXIT_USAGE)
    speed = 0.0 if args.quick else args.speed
    if speed < 0:
        raise CliError("demo: --speed cannot be negative", EXIT_USAGE)
    ratio = 1.0 / speed if speed > 0 else 0.0
    progress_mode = "plain" if args.plain else args.progress
    out, err = sys.stdout, sys.stderr
    _decisions_shown()  # the demo collects every decision and sums them up
    with _opened_store(args.store or "memory://") as store:
        runs: List[_HostRun] = []
        start = _demo_start(time.time())
        try:
            for index, scenario in enumerate(_demo_scenarios(urls)):
                clock = _DemoClock(start, ratio)
                base = DEMO_PORT_BASE if args.port_base is None else args.port_base
                port = base + index if base else 0
                portal = _start_portal(scenario, clock, port)
                run = _HostRun(
                    name=scenario.name,
                    description=scenario.description,
                    expected=scenario.expected,
                    enforced=_enforced_per_minute(scenario.limiter),
                    limiter=scenario.limiter,
                    portal=portal,
                    clock=clock,
                    total=scenario.urls,
                    url=portal.url,
                    host=host_key(portal.url),
                )
                runs.append(run)
            _resume_virtual_time(runs, store)
            print(
                f"Crawling {len(runs)} local portals that each use Retry-After their own way "
                f"(virtual time{'' if not speed else f', {speed:g}x real time'}).",
                file=err,
            )
            html = getattr(args, "html", None)
            code = _demo_crawl(runs, store, progress_mode, args.seed, out, err, args.store, html)
            if code == EXIT_OK and html:
                _write_page(html, runs, store, out)
            return code
        finally:
            for run in runs:
                run.portal.stop()


def _demo_start(now: float) -> float:
    """Where the demo's virtual time starts: the whole hour before the last one, so that the
    portals' clock-aligned windows are in the same phase on every run (a run is then the same
    run, given the seed) and the crawl ends before the real time."""
    return math.floor(now / 3600.0) * 3600.0 - 3600.0


#: The latest moment a kept store's time may be taken for (about a year from now, in the
#: demo's virtual time that starts at the real time): beyond it, it is damage.
_DEMO_HORIZON = 366 * 86400.0


def _plausible_epoch(value: float) -> bool:
    return (
        isinstance(value, (int, float))
        and math.isfinite(value)
        and 0 < value < time.time() + _DEMO_HORIZON
    )


def _resume_virtual_time(runs: Sequence[_HostRun], store: StateStore) -> None:
    """Start each host's virtual clock after the last moment a kept store knows of it, so that
    a second run with ``--store`` continues where the first one left."""
    for run in runs:
        state = store.get(run.host)
        if state is not None:
            # Only times a clock can reach: a damaged store's NaN or 1e300 is no moment.
            times = [t for t in (state.updated_at, state.blocked_until) if _plausible_epoch(t)]
            ahead = max(times, default=0.0) - run.clock.time()
            if ahead > 0:
                run.clock.advance(ahead + 1.0)
        run.origin = run.clock.monotonic()


def _write_page(path: str, runs: Sequence[_HostRun], store: StateStore, out: IO[str]) -> None:
    """Write the HTML report of this run: what the store learned, plus every wait and give-up
    the run decided, with its reason (the store keeps no waits)."""
    from .report import render_html

    decisions = [d for run in runs for d in run.decisions]
    labels = {run.host: f"{run.name}: {run.description}" for run in runs if run.host}
    page = render_html(_store_items(store), now=time.time(), decisions=decisions, labels=labels)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
    except OSError as exc:
        raise CliError(f"demo: cannot write {path}: {exc.strerror or exc}") from exc
    print(f"\nThe report of this run, its waits and give-ups included: {path}", file=out)


def _demo_crawl(
    runs: Sequence[_HostRun],
    store: StateStore,
    mode: str,
    seed: Optional[int],
    out: IO[str],
    err: IO[str],
    kept: Optional[str],
    html: Optional[str] = None,
) -> int:
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=_crawl,
            args=(run, store, stop, None if seed is None else seed + i),
            name=f"demo-{run.name}",
            daemon=True,
        )
        for i, run in enumerate(runs)
    ]
    progress: Any = None
    if mode == "rich" or (mode == "auto" and _use_rich(err)):
        progress = _RichProgress(runs, store, err)
    elif mode in ("plain", "auto"):
        progress = _PlainProgress(runs, store, err)
    started = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(timeout=0.1)
            if progress is not None:
                progress.update()
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        if progress is not None:
            progress.close()
        print("interrupted", file=err)
        return EXIT_INTERRUPTED
    if progress is not None:
        progress.close()
    print(f"Done in {time.monotonic() - started:.1f} s of real time.", file=err)
    _demo_summary(runs, store, out)
    command = _command()
    # The page `report --html` writes has no waits (a store keeps none): the hint never names
    # the file this run's own page went to, which it would overwrite.
    page = "hosts.html" if html == "report.html" else "report.html"
    if kept:
        shown = redact_url(kept)
        print(f"\nKept in {shown}; see it with:", file=out)
        print(f"  {command} report --store {shown}", file=out)
        print(f"  {command} report --store {shown} --html {page}", file=out)
    else:
        print("\nTo keep what was learned, as a page with this run's waits, then see it:", file=out)
        print(f"  {command} demo --store json://demo-hosts.json --html report.html", file=out)
        print(f"  {command} report --store json://demo-hosts.json", file=out)
    return EXIT_OK
