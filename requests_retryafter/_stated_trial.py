"""Trials of an even pace on a host whose statements pace it: whether they pace it well.

A host that states what remains of its window and when it resets is paced by those
statements (:mod:`._stated`): a burst while some remain, a wait for the reset once none does.
That gives the host's whole rate when its windows free their budget at the reset they state.
Some hosts do not: a sliding window counter (``limits``' and Flask-Limiter's, Cloudflare's,
Kong's) frees its places a little at a time, so a wait for its reset frees one or a few;
some state their resets late (rounded up to the next whole second: two seconds off, on a
window of one). Their answers do not tell them apart from a window shared with another
client, a moving window, or a window read short. So an even pace is tried, and kept only if
it did better:

- Each time an answer says none of the window remains (a run-out) counts, with no refusal
  since the last, while the client is held back by the statements: one whose next request
  went more than ``Tuning.trial_idle`` after the wait ended was busy or paused, and the
  run-outs count afresh. After ``Tuning.trial_after`` run-outs in a row, the rate the statements
  gave is measured: the 2xx from the first of them to the last, over that span. (The wait
  after a run-out is for the reset stated, or for one predicted from the answers; no trial
  starts at the end of a predicted one: a refusal there would answer the prediction.) The
  run's first run-out is not counted: it ends the burst a host idle before the run let
  through, whose 2xx came before it, and the wait after it pays for that burst. On a
  counter of 60 a minute, that wait was 54 s before a place freed each second, and
  counted, the statements read as 2 requests in 55 s.
- The host is then paced evenly, from the end of the last run-out's wait, at twice that
  rate (a slow start's step), at most ``utilization`` of its stated rate, where that is at
  least ``Tuning.trial_gain`` times it; its answers saying none remains are not waited for.
  That is a step, and it lasts as long as the measurement took.
- A step whose 2xx came at least ``Tuning.trial_gain`` times as fast as the rate before it
  is kept, and the next step, twice it, starts at once, until ``utilization`` of the stated
  rate is reached. A step that did no better, or was refused, goes back to the pace kept
  before it, and the next waits, and lasts, twice as long. Without a pace kept (the first step), and
  at any refusal of a kept pace, the statements pace the host again, and the next trial
  waits for twice as many run-outs.
- A refusal while paced evenly also takes the stated window as a second longer, for the
  steps' ceiling (``ctx.stated`` itself is left as read): a window's length is read from
  the stated resets, which can read short (a window of 2 s on the clock, with epoch resets,
  reads as 1 s: see ``StatedLimits._whole``). Once the ceiling is no longer
  ``Tuning.trial_gain`` times what the statements gave, no step is tried.

Twice, not the whole stated rate at once: a window that another client shares has only part
of its budget left, and a step there is refused; each refusal on such a window can cost
more (a moving window shared with a client at 2 a second went from 2.4 of its 3 left to 1.5,
with ten refusals, when the first step went straight to the stated rate).

The pace kept is stored (``HostState.even_pace``, with how long its step lasted): the next
run starts from it, as from a pace kept (at most ``utilization`` of the stated rate), with no
run-outs to wait for, once its answers state what remains and the limit (its first request
goes before). A refusal within its step's span in that run drops it, and the statements
pace the host again, as in a fresh run: the refusal may be no fault of the pace (the
previous run's requests still counted, or another client's), so nothing else is counted
against the host's windows then. Only a worker alone tries, or paces evenly, on a
host where no other client's requests were seen counted (workers sharing a host of short
windows go on their shared schedule; see ``Pacer.send_gap``).
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Optional, Tuple

from ._context import ENGINE_LOG, HostContext

__all__ = ["StatedTrial"]


class StatedTrial:
    """The trials of an even pace on one host (see the module).

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        # Run-outs before the next trial (doubled after each that failed).
        self._after = ctx.tuning.trial_after
        # ``(monotonic, 2xx so far)`` at the latest run-outs since the last refusal or
        # trial, and when the wait after the last one ends (until the next 2xx).
        self._run_outs: Deque[Tuple[float, int]] = deque(maxlen=self._after)
        self._ready: Optional[float] = None
        self._answers = 0
        # Whether another client's requests were seen counted: no trial then.
        self._others = False
        # Whether the run's first run-out came: it ends the burst a host idle before the
        # run let through, and the wait after it is for what that burst spent, not the
        # statements' pace of a host in use (not counted).
        self._opened = False
        # The step under way: ``(how long it runs, the rate it is to beat)``; ``None`` when
        # none is. And its first 2xx, ``(monotonic, 2xx so far)``: its rate is measured from
        # there (from its start, a step of ``n`` answers would count ``n`` over ``n - 1``
        # gaps).
        self._trial: Optional[Tuple[float, float]] = None
        self._first: Optional[Tuple[float, int]] = None
        # The last pace that did better and was not refused (``None``: the statements').
        self._kept: Optional[float] = None
        # How long a step runs; when the next one may start (monotonic; ``None``: no more
        # this run); and whether that is to be set at the next 2xx (a step went back).
        self._span = 0.0
        self._next_step: Optional[float] = None
        self._pending = False
        # Seconds added to the stated window for the steps' ceiling: one for each refusal
        # of an even pace.
        self._longer = 0.0
        #: Requests per second of the even pace (a step's, or one kept), or ``None`` while
        #: the statements pace the host.
        self.rate: Optional[float] = None
        # When the next request at that pace may go (monotonic).
        self._next = 0.0
        # Whether the pace is an earlier run's, and its step's span in this run not over.
        self._resumed = ctx.state.even_pace is not None
        if ctx.state.even_pace is not None:
            # An earlier run's kept pace: kept again, and stepped up from when its time comes.
            self.rate = self._kept = ctx.state.even_pace[0]
            self._span, self._pending = ctx.state.even_pace[1], True

    def pace(self) -> Optional[float]:
        """The rate of the even pace, for a worker alone that paces, on a host whose last
        2xx stated what remains and its limit (``None``: the statements, or nothing, pace
        the host; a run's first request goes before a pace stored from an earlier run)."""
        ctx = self.ctx
        if self.rate is None or ctx.share > 1 or not ctx.policy.pace:
            return None
        if not ctx.counted or ctx.stated is None:
            return None
        return self.rate

    def reserve(self, mono: float) -> Optional[float]:
        """Reserve the next request's place at the even pace: seconds to wait for it, or
        ``None`` when the statements pace the host."""
        rate = self.pace()
        if rate is None:
            return None
        slot = max(mono, self._next)
        self._next = slot + 1.0 / rate
        return slot - mono

    def release(self, mono: float) -> bool:
        """Give back the last place :meth:`reserve` gave (the call stopped before using it);
        whether there was an even pace to give it back to."""
        rate = self.pace()
        if rate is None:
            return False
        self._next = max(mono, self._next - 1.0 / rate)
        return True

    def answered(self, mono: float, sent: float, wall: float) -> None:
        """A 2xx answered at ``mono`` (``wall``: epoch) to a request sent at ``sent`` stated
        what remains: a step long enough is judged, and a kept pace stepped up when its time
        comes. The first request after a run-out's wait that went more than
        ``Tuning.trial_idle`` after the wait ended shows a client that was not held back by
        the statements (it was busy, or paused): the run-outs count afresh."""
        self._answers += 1
        rate = self.pace()
        if rate is not None and self._resumed:
            # An earlier run's pace goes no faster than this run's statements allow.
            ceiling = self._ceiling()
            if ceiling is not None and rate > ceiling:
                rate = self.rate = self._kept = ceiling
                self._store(wall)
        if rate is not None:
            # The next request at the pace goes a gap after this one (the run's first
            # request, sent before the statements said it was this host, was not paced).
            self._next = max(self._next, sent + 1.0 / rate)
        ready, self._ready = self._ready, None
        if ready is not None and sent - ready > self.ctx.tuning.trial_idle:
            self._run_outs.clear()
        trial = self._trial
        if trial is None:
            if self._pending:
                self._pending, self._next_step = False, mono + self._span
            elif (
                self._kept is not None
                and self._next_step is not None
                and mono >= self._next_step
                and self.pace() is not None  # (held while workers share the host)
            ):
                self._step(self._kept)
            return
        if self._first is None:
            self._first = (mono, self._answers)
            return
        (span, before), (first, answers) = trial, self._first
        if mono - first < span or mono <= first:
            return
        self._trial = self._first = None
        rate = (self._answers - answers) / (mono - first)
        pace = self.rate
        if pace is not None and rate >= self.ctx.tuning.trial_gain * before:
            self._kept = pace
            self._store(wall)
            ENGINE_LOG.info(
                "%s: paced evenly at %.3g requests/s, it answered %.3g, against %.3g before: kept",
                self.ctx.host,
                pace,
                rate,
                before,
            )
            self._step(pace)
            return
        why = f"paced evenly, it answered {rate:.3g} requests/s, against {before:.3g}"
        if self._kept is not None:
            self._back(why)
        else:
            self._end(why, wall)

    def ran_out(self, mono: float, wait: float, *, predicted: bool = False) -> None:
        """An answer at ``mono`` said none of the window remains, and the next request waits
        ``wait`` s for the reset: a trial may start at its end. ``predicted``: the wait is
        for a reset predicted from the answers (see ``StatedLimits``), not for one stated:
        it counts, but no trial starts there (a refusal at its end would answer the
        prediction, not the trial)."""
        if self.rate is not None or not self.ctx.policy.pace:
            return
        self._ready = mono + wait
        if not self._opened:
            self._opened = True
            return
        run_outs = self._run_outs
        run_outs.append((mono, self._answers))
        if len(run_outs) < self._after or predicted:
            return
        since, answers = run_outs[0]
        run_outs.clear()
        ctx = self.ctx
        if ctx.share > 1 or self._others or mono <= since:
            return
        before = (self._answers - answers) / (mono - since)
        self._span = mono - since
        self._step(before, statements=True)

    def refused(self, wall: float, *, predicted: bool = False) -> None:
        """A rejection came (at epoch ``wall``): the run-outs count afresh; a step goes back
        to the pace kept before it, and a kept pace ends. An earlier run's pace, refused
        within its step's span in this run, is dropped with nothing counted against the
        host: the statements pace it as in a fresh run. ``predicted``: the request went at
        a reset predicted from the answers, ahead of the statements; its refusal answers
        that try and says nothing of the pace the statements give, so the run-outs count
        on, and the wait after it is the refusal's (the next request, held back by it, is
        not idle)."""
        rate = self.pace()
        if predicted and rate is None:
            self._ready = None
            return
        self._run_outs.clear()
        if rate is None:
            return  # (no even pace in force: nothing of it was refused)
        if self._resumed:
            self._resumed = False
            self._drop(wall)
            ENGINE_LOG.info(
                "%s: refused at %.3g requests/s, the pace an earlier run kept: paced by its "
                "statements again",
                self.ctx.host,
                rate,
            )
            return
        # The host's windows may be longer than the statements showed (see
        # ``StatedLimits._whole``: they can read short), and are whole seconds long.
        self._longer += 1.0
        if self._trial is not None and self._kept is not None:
            self._back(f"refused at {rate:.3g} requests/s")
        else:
            self._end(f"refused at {rate:.3g} requests/s", wall)

    def shared(self, wall: float) -> None:
        """Another client's requests were seen counted in the host's windows (at epoch
        ``wall``)."""
        self._others = True
        if self.rate is not None:
            self._end("another client's requests are counted in its windows", wall)

    def _step(self, before: float, *, statements: bool = False) -> None:
        """Try the next pace from ``before`` (requests per second the statements gave, or
        the pace just kept): twice it (a slow start's step), at most ``utilization`` of the
        stated rate, if that is at least ``Tuning.trial_gain`` times it."""
        ctx = self.ctx
        ceiling = self._ceiling()
        if ceiling is None or ctx.stated is None:
            return
        self._resumed = False
        even = min(ceiling, 2.0 * before)
        if even < ctx.tuning.trial_gain * before:
            self._next_step = None  # nothing to gain: the pace stays
            return
        self.rate = even
        self._trial, self._first = (self._span, before), None
        ENGINE_LOG.info(
            "%s: %s %.3g requests/s over %.1f s, of the %.3g it states: trying an even pace "
            "at %.3g",
            ctx.host,
            "its statements paced it at" if statements else "paced evenly, it answered",
            before,
            self._span,
            ctx.stated.rate,
            even,
        )

    def _back(self, why: str) -> None:
        """A step did no better, or was refused (``why``): back to the pace kept before it,
        and the next step waits twice as long."""
        self._trial, self._first, self.rate = None, None, self._kept
        self._span *= 2.0  # (this run's: the store keeps the span the kept pace's step had)
        self._pending = True
        ENGINE_LOG.info("%s: %s: back to %.3g requests/s", self.ctx.host, why, self.rate or 0.0)

    def _end(self, why: str, wall: float) -> None:
        """The even pace ends (``why``, at epoch ``wall``): the statements pace the host
        again, and the next trial waits for twice as many run-outs."""
        self._drop(wall)
        self._after *= 2
        self._run_outs = deque(maxlen=self._after)
        ENGINE_LOG.info(
            "%s: %s: paced by its statements again (the next trial after %d run-outs)",
            self.ctx.host,
            why,
            self._after,
        )

    def _ceiling(self) -> Optional[float]:
        """The fastest even pace worth trying: ``utilization`` of the stated rate, over the
        stated window and a second more for each refusal of an even pace (``None`` before
        any statement)."""
        stated = self.ctx.stated
        if stated is None:
            return None
        rate = stated.rate
        if stated.burst and stated.window:
            rate = stated.burst / (stated.window + self._longer)
        return self.ctx.policy.utilization * rate

    def _drop(self, wall: float) -> None:
        """No even pace from here on, nor one stored (as of epoch ``wall``): the statements
        pace the host."""
        self._trial, self._first, self.rate, self._kept = None, None, None, None
        self._next_step, self._pending = None, False
        self._store(wall)

    def _store(self, wall: float) -> None:
        """Keep the pace kept (and how long its step lasted) in the host's state, for the
        next run; or that there is none, as of epoch ``wall`` (``even_pace_at``: a merge
        with another writer's entry takes the pace set last)."""
        ctx = self.ctx
        kept = None if self._kept is None else (self._kept, self._span)
        if ctx.state.even_pace != kept:
            ctx.state = ctx.state.replace(even_pace=kept, even_pace_at=wall)
            ctx.dirty = True
