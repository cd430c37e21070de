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
  since the last. After ``Tuning.trial_after`` run-outs in a row, the rate the statements
  gave is measured: the 2xx from the first of them to the last, over that span. (The wait
  after a run-out is for the reset stated, or for one predicted from the answers; no trial
  starts at the end of a predicted one: a refusal there would answer the prediction.)
- If ``utilization`` of the stated rate is at least ``Tuning.trial_gain`` times that, the
  host is paced evenly at ``utilization`` of its stated rate (its answers saying none
  remains are not waited for) from the end of the last run-out's wait, for as long as the
  measurement took: the trial.
- If the trial's 2xx came at least ``Tuning.trial_gain`` times as fast as the statements',
  the even pace is kept for the rest of the run. Otherwise, and at the first refusal (in the
  trial or after it), the statements pace the host again, and the next trial waits for
  twice as many run-outs.

Nothing is stored: the next run measures and tries again, which costs it seconds. Only a
worker alone tries, on a host where no other client's requests were seen counted (workers
sharing a host of short windows go on their shared schedule; see ``Pacer.send_gap``).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ._context import ENGINE_LOG, HostContext
from .state import LimitEstimate

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
        # ``(monotonic, 2xx so far)`` at each run-out since the last refusal or trial.
        self._run_outs: List[Tuple[float, int]] = []
        self._answers = 0
        # Whether another client's requests were seen counted: no trial then.
        self._others = False
        # The trial under way: ``(how long it runs, the statements' rate it is to beat)``;
        # ``None`` when none is (the even pace, if any, was kept). And its first 2xx,
        # ``(monotonic, 2xx so far)``: its rate is measured from there (from its start, a
        # trial of ``n`` answers would count ``n`` over ``n - 1`` gaps).
        self._trial: Optional[Tuple[float, float]] = None
        self._first: Optional[Tuple[float, int]] = None
        #: Requests per second of the even pace (a trial's, or one kept), or ``None`` while
        #: the statements pace the host.
        self.rate: Optional[float] = None
        # When the next request at that pace may go (monotonic).
        self._next = 0.0

    def pace(self) -> Optional[float]:
        """The rate of the even pace, for a worker alone that paces (``None``: the
        statements pace the host)."""
        ctx = self.ctx
        if self.rate is None or ctx.share > 1 or not ctx.policy.pace:
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

    def answered(self, mono: float) -> None:
        """A 2xx answered at ``mono`` stated what remains: a trial long enough is judged."""
        self._answers += 1
        trial = self._trial
        if trial is None:
            return
        if self._first is None:
            self._first = (mono, self._answers)
            return
        (span, before), (first, answers) = trial, self._first
        if mono - first < span:
            return
        self._trial = self._first = None
        rate = (self._answers - answers) / (mono - first)
        if rate >= self.ctx.tuning.trial_gain * before:
            ENGINE_LOG.info(
                "%s: paced evenly, it answered %.3g requests/s, against %.3g paced by its "
                "statements: paced evenly from now on",
                self.ctx.host,
                rate,
                before,
            )
            return
        self._end(f"paced evenly, it answered {rate:.3g} requests/s, against {before:.3g}")

    def ran_out(self, mono: float, *, predicted: bool = False) -> None:
        """An answer at ``mono`` said none of the window remains, and the next request waits
        for the reset: a trial may start at the end of that wait. ``predicted``: the wait is
        for a reset predicted from the answers (see ``StatedLimits``), not for one stated:
        it counts, but no trial starts there (a refusal at its end would answer the
        prediction, not the trial)."""
        if self.rate is not None:
            return
        run_outs = self._run_outs
        run_outs.append((mono, self._answers))
        if len(run_outs) < self._after or predicted:
            return
        since, answers = run_outs[0]
        span = mono - since
        run_outs.clear()
        ctx = self.ctx
        stated = ctx.stated
        if ctx.share > 1 or self._others or stated is None or span <= 0:
            return
        before = (self._answers - answers) / span
        even = ctx.policy.utilization * stated.rate
        if even < ctx.tuning.trial_gain * before:
            return  # its statements pace it at its rate, or near it: nothing to gain
        self.rate = even
        self._trial, self._first = (span, before), None
        ENGINE_LOG.info(
            "%s: its statements paced it at %.3g requests/s over %.1f s, of the %.3g it "
            "states: trying an even pace at %.3g",
            ctx.host,
            before,
            span,
            stated.rate,
            even,
        )

    def refused(self) -> None:
        """A rejection came: the run-outs count afresh, and an even pace ends."""
        self._run_outs.clear()
        if self.rate is None:
            return
        stated = self.ctx.stated
        if stated is not None and stated.burst and stated.window:
            # The host's windows are longer than the statements showed (see
            # ``StatedLimits._whole``: they can read short), and whole seconds long.
            window = stated.window + 1.0
            rate = stated.burst / window
            self.ctx.stated = LimitEstimate(
                rate, window, rate, stated.updated_at, "stated", burst=stated.burst
            )
        self._end("refused while paced evenly")

    def shared(self) -> None:
        """Another client's requests were seen counted in the host's windows."""
        self._others = True
        if self.rate is not None:
            self._end("another client's requests are counted in its windows")

    def _end(self, why: str) -> None:
        """The even pace ends (``why``): the statements pace the host again."""
        self._trial, self._first, self.rate = None, None, None
        self._after *= 2
        ENGINE_LOG.info(
            "%s: %s: paced by its statements again (the next trial after %d run-outs)",
            self.ctx.host,
            why,
            self._after,
        )
