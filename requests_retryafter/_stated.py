"""Stated limits: what a host's answers say of its limit, taken as evidence, never as orders.

From the ``RateLimit*`` and ``X-RateLimit-*`` (or ``X-Rate-Limit-*``) fields of each answer
it keeps the stated rate (a first estimate while nothing was learned, and the documented
figure for reports), whether
the host states what remains of its window (those statements then pace it, except workers
sharing a host of short windows, which send its stated budget on their shared schedule), and
the closest bound on the moment a place frees (stated resets are whole seconds, rounded up),
which an answer saying ``remaining=0`` waits for (off that schedule), unless an even pace
does better (see :mod:`._stated_trial`); a reset further than ``max_sleep``, that long, and
not at all once the requests sent at the end of such waits got through twice in a row
(:class:`_Refuted`). Absurd statements are ignored.

The model: a host that states ``limit`` and ``remaining`` counts requests in windows of some
length ``L``, and a counted request frees its place ``L`` after the host counted it (a fixed
window opened by a request resets ``L`` after it; a moving window lets each request go ``L``
after it came, and states when its oldest goes). An answer saying ``remaining = r`` counts
``limit - r`` requests; while the run's own 2xx are the only ones counted, the oldest is
the ``(limit - r)``-th most recent, and it leaves at the reset the answer states (a whole
second, rounded up) or less than a second before. So each answer bounds ``L``: at most its
stated reset less that request's send, more than its stated reset less a second less that
request's answer (and less this answer's round trip). Only requests sent after a window
ran out are counted from (the run's first may fall anywhere in a window on the clock). The
bounds are intersected; an answer that contradicts them starts them again from its own,
which predict only once answers counting from another request agree. An answer saying
``remaining=0`` is then waited for until the ``limit``-th most recent 2xx's answer plus the
longest length the bounds allow (plus ``Tuning.reset_margin``), when that comes before the
stated reset: sends and answers bracket the moments the host counted, so a network's jitter
widens the bounds and never makes them wrong. Windows opened at the same phase each time
never narrow the bounds by themselves, so a short window is probed once at the longest
whole second short of their upper end (window lengths are whole seconds): a probe that
passes shows the window's length. A refusal at a predicted moment (windows on the clock,
other clients counted too) stops predictions for the host, so predicting costs a host at
most one refusal a run; so does ``remaining`` falling by more than the run's own requests
could count between two answers (other clients counted), and nothing is predicted while
workers share the host.

Threads sharing an adapter send several requests at once, and their answers come back out
of the order the host counted them. The run's own requests that may count between two
answers are those sent since the latest one's and those on the wire beside either (numbered
by ``HostTracker.number``). An answer to a request that was on the wire as the latest one
came, stating more remaining than it, says only how the window stood before: it is kept
among the window's requests, which are kept in the order they went, and changes nothing
else. Bounds are taken
only from answers with nothing else on the wire (a request the host counted may be
unanswered yet), and a reset predicted while requests are on the wire counts from a request
late enough to be in the window (late, never early). :meth:`StatedLimits.places` tells
the adapter when a request takes the last place the statements leave, which is then
answered before the next goes.

The stated reset itself bounds only the request that was oldest when it was stated: while
each answer's ``remaining`` is below the last one's, no request left the window and the
closest statement is kept; one that is not below shows a request left (a moving window,
or a new window), and its statement starts the bound again.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Deque, Optional, Tuple

from ._context import ENGINE_LOG, HostContext, replace_limit
from ._stated_trial import StatedTrial
from .parsing import RateLimitInfo
from .state import MAX_RATE, MAX_SECONDS, LimitEstimate

__all__ = ["StatedLimits"]


class StatedLimits:
    """What one host states of its limit.

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._ignored_statement = ""
        # The earliest moment (monotonic) the oldest counted request can leave the window,
        # from every answer since that request was the oldest: each stated reset is whole
        # seconds, rounded up, so each bounds it from above, and the smallest is the closest.
        self._reset_by: Optional[float] = None
        self._remaining: Optional[int] = None
        # ``(sent, answered, after, order)`` (monotonic) of the host's latest 2xx that stated
        # what remains, oldest first (the requests its windows count), in the order they
        # went (``order``: their numbers, where known); ``after``: whether it was the first
        # sent after an answer said ``remaining=0`` (at ``_ran_out``).
        self._served: _Served = deque(maxlen=ctx.tuning.reset_history)
        self._ran_out: Optional[float] = None
        # The number (``HostTracker.number``) of the latest request whose answer stated what
        # remains, when known: answers to concurrent requests (threads) come out of order.
        self._latest: Optional[int] = None
        # The run's other requests on the wire as that answer was taken (threads): the host
        # may count any of them between it and the next; and the latest number given then
        # (a request numbered up to it may have been counted before that answer's).
        self._beside = 0
        self._issued = 0
        # The bounds on a window's length that the answers agree on (see _Lengths).
        self._lengths = _Lengths(ctx)
        # Whether the host was last waited for until a predicted reset, with no 2xx since;
        # and the window length that wait probed with the moment it ended, if it was a probe.
        self._predicted = False
        self._probed: Optional[Tuple[float, float]] = None
        #: Whether resets are predicted from the answers' bounds (until one is refused).
        self.predicts = True
        self._refuted = _Refuted(ctx)
        #: The trials of an even pace (:mod:`._stated_trial`).
        self.trial = StatedTrial(ctx)

    def observe(
        self,
        info: RateLimitInfo,
        mono: float,
        wall: float,
        sent: Optional[float] = None,
        seq: Optional[int] = None,
        on_wire: int = 0,
        issued: Optional[int] = None,
    ) -> float:
        """Take the statement ``info`` of a 2xx answered at ``mono``/``wall`` (its request
        sent at ``sent``, monotonic; ``mono`` if unknown; numbered ``seq`` by
        ``HostTracker.number``, if known; ``on_wire``: the run's other requests on the wire
        now; ``issued``: the latest number given) as evidence; return the seconds the next
        request must wait for the stated reset (0: none).

        A stated rate seeds the learned limit only while nothing was learned; it is always
        kept as the documented figure. ``Remaining: 0`` waits for the closest bound on the
        reset, within ``max_sleep``.
        """
        ctx = self.ctx
        absurd = self._absurd(info)
        if absurd:
            if absurd != self._ignored_statement:
                self._ignored_statement = absurd
                ENGINE_LOG.info("%s: stated limit ignored: %s", ctx.host, absurd)
            return 0.0
        sent = mono if sent is None else min(sent, mono)
        if info.limit and info.window:
            documented = info.limit / info.window
            limit = ctx.state.limit
            if limit is None:
                ctx.set_limit(
                    LimitEstimate(documented, info.window, documented, wall, "stated"), wall
                )
            elif limit.documented != documented:
                ctx.state = ctx.state.replace(limit=replace_limit(limit, documented=documented))
                ctx.dirty = True
        ctx.counted = info.remaining is not None and info.reset_after is not None
        if info.limit and info.reset_after is not None and info.remaining is not None:
            self._whole(info.limit, info.reset_after, info.window, wall)
        if self._probed is not None and sent >= self._probed[1]:
            self._probe_passed(info.limit, wall)
        self._refuted.served(sent, wall)
        remaining, last = info.remaining, self._remaining
        # The run's requests the host may have counted since the latest answer's: those sent
        # after it, and those on the wire beside it or beside this one (threads: the host
        # counts them in the order they reach it, not in the order they were numbered).
        # ``remaining`` may fall by as many.
        own = 1
        if remaining is not None and seq is not None and self._latest is not None:
            if seq <= self._issued and last is not None and remaining >= last:
                # An answer overtaken by the latest one, to a request that was on the wire
                # as that one came: the host may have counted it before, and its statement
                # says no more than the window as it stood then (a window that freed a
                # place shows in an answer to a request sent since).
                self._serve(seq, sent, mono, False)
                self.trial.answered(mono, sent, wall)
                return 0.0
            own = max(1, seq - self._latest) + self._beside + on_wire
        if remaining is not None and last is not None and last - remaining > own:
            self._shared(wall)
        if remaining is not None:
            if seq is not None:
                self._latest = seq if self._latest is None else max(seq, self._latest)
                self._beside = on_wire
                self._issued = seq if issued is None else max(seq, issued)
            after = self._ran_out is not None and sent >= self._ran_out
            if after:
                self._ran_out = None
            self._serve(seq, sent, mono, after)
            self._remaining = remaining
            self.trial.answered(mono, sent, wall)
        if info.reset_after is not None and info.reset_after >= 0:
            stated = mono + info.reset_after
            left = remaining is not None and (last is None or remaining >= last)
            if self._reset_by is None or mono >= self._reset_by or left or stated < self._reset_by:
                self._reset_by = stated  # the oldest request changed, or a closer bound
            if info.limit and remaining is not None and self.predicts and not on_wire:
                # (With requests on the wire, some the host counted may be unanswered yet.)
                self._lengths.bound(self._served, info.limit - remaining, stated, mono - sent)
        if remaining != 0 or self.trial.pace() is not None:
            return 0.0  # (paced evenly: the pace is the wait, and a refusal ends it)
        self._ran_out = mono
        if self._reset_by is not None:
            # Wait for the closest bound on the reset, not for the one this answer states
            # (a reset rounded up from 0.2 s reads 1 s: on a 1 s window, waiting for it would
            # halve the rate), or for the reset the windows' lengths predict, if sooner.
            reset = self._reset_by
            predicted, probe = self._predicted_reset(info.limit, mono, on_wire)
            if predicted is not None and predicted < reset:
                reset = predicted
                self._predicted = True
                self._probed = None if probe is None else (probe, predicted)
            if reset - mono > ctx.policy.max_sleep and not self._refuted.waits(reset):
                return 0.0
            wait = min(reset - mono, ctx.policy.max_sleep)
            self.trial.ran_out(mono, wait, predicted=self._predicted)
            return wait
        return 0.0

    def _serve(self, seq: Optional[int], sent: float, answered: float, after: bool) -> None:
        """Keep a 2xx that stated what remains (its request numbered ``seq``, sent at
        ``sent``, answered at ``answered``) among the latest, in the order the requests
        went: an answer that overtook another's goes after it."""
        served = self._served
        last = served[-1][3] if served else 0.0
        order = last if seq is None else float(seq)  # (unknown: after the others)
        at = len(served)
        while at > 0 and served[at - 1][3] > order:
            at -= 1
        if len(served) == served.maxlen:
            if at == 0:
                return  # older than every one kept
            served.popleft()
            at -= 1
        served.insert(at, (sent, answered, after, order))

    def places(self, seq: int, beside: int) -> Optional[int]:
        """The places the latest statement of what remains leaves the request numbered
        ``seq``, with ``beside`` others on the wire: less the requests numbered since that
        statement's, or those on the wire if more (the host may count them after it);
        ``None``: unknown, no statement numbered, or the host's statements of none
        remaining refuted by its own answers (see :class:`_Refuted`)."""
        if self._remaining is None or self._latest is None or self.ctx.state.stated_refuted:
            return None
        return self._remaining - max(seq - 1 - self._latest, beside)

    def _whole(self, limit: int, reset_after: float, window: Optional[float], wall: float) -> None:
        """Keep what a statement says of the host's whole limit (``HostContext.stated``): its
        ``limit`` per window, the ``window`` stated (``RateLimit-Policy``'s ``w``) or else the
        longest the stated resets show. A reset is stated in whole seconds, rounded up, and
        the oldest request counted leaves at most a window after it came: so each stated
        reset, rounded down, is at most a window's length, and the longest of them is the
        window's once an answer counted from a window's first request. (Before that, the
        window can read short; and an epoch reset read on a clock behind the host's reads
        long: the estimate only grows, in this process.)"""
        old = self.ctx.stated
        if window is None:
            shown = max(1.0, float(math.floor(reset_after + 1e-6)))
            window = shown if old is None or old.window is None else max(old.window, shown)
        if old is not None and (old.burst, old.window) == (limit, window):
            return
        rate = limit / window
        if rate > MAX_RATE:
            return  # more than any host answers: no evidence (see _absurd)
        self.ctx.stated = LimitEstimate(rate, window, rate, wall, "stated", burst=limit)

    def trying(self) -> bool:
        """Whether the next request tries something the statements did not say: a reset
        predicted from the answers, or an even pace on trial. A refusal then answers the
        try (which stops), and says nothing more of the host's limit."""
        return self._predicted or self.trial.pace() is not None

    def served(self) -> None:
        """A 2xx came: the last predicted reset (if any) held."""
        self._predicted = False

    def refused(self, wall: float) -> None:
        """A rejection came (at epoch ``wall``): if the host was waited for until a predicted
        reset, its windows do not count from the run's own requests (they follow the clock,
        or another client shares them), and only stated resets are waited for from now on.
        An even pace on trial (or kept) ends."""
        self._probed = None
        self._refuted.refused(wall)
        self.trial.refused(wall, predicted=self._predicted)
        if self._predicted:
            self._predicted = False
            self.predicts = False
            ENGINE_LOG.info(
                "%s: refused at a reset predicted from its answers; waiting for the resets "
                "it states from now on",
                self.ctx.host,
            )

    def _shared(self, wall: float) -> None:
        """``remaining`` fell by more than this run's one request since the last answer:
        the host counts other clients' requests (or this run's concurrent ones) in the same
        windows, so the oldest counted request is not the run's to know, and only stated
        resets are waited for from now on; and no even pace is tried."""
        self.trial.shared(wall)
        if self.predicts:
            self.predicts = False
            ENGINE_LOG.info(
                "%s: its windows count requests this run did not answer in order; waiting "
                "for the resets it states",
                self.ctx.host,
            )

    def _probe_passed(self, limit: Optional[int], wall: float) -> None:
        """The first 2xx sent after a probe's wait: the windows are that whole second long."""
        assert self._probed is not None
        probe = self._probed[0]
        self._probed = None
        self._lengths.probed(probe)
        if limit:
            self._shown(limit, probe, wall)

    def _shown(self, limit: int, window: float, wall: float) -> None:
        """A probe showed the host's windows are ``window`` long: keep ``limit`` per
        ``window`` as its stated limit (the documented figure, and the learned limit while
        nothing else was learned), so that the next run starts from it."""
        ctx = self.ctx
        rate = limit / window
        current = ctx.state.limit
        if current is None:
            ctx.set_limit(LimitEstimate(rate, window, rate, wall, "stated"), wall)
        elif current.documented is None:
            ctx.state = ctx.state.replace(limit=replace_limit(current, documented=rate))
            ctx.dirty = True
        ENGINE_LOG.info(
            "%s: its windows of %d requests are %g s long: a reset predicted at that length held",
            ctx.host,
            limit,
            window,
        )

    def _predicted_reset(
        self, limit: Optional[int], mono: float, on_wire: int = 0
    ) -> Tuple[Optional[float], Optional[float]]:
        """When the window that ran out at ``mono`` (with ``on_wire`` of the run's other
        requests on the wire) frees a place, and the whole second probed, as the agreed
        lengths predict it (:meth:`_Lengths.predict`): ``None`` while predictions are
        stopped or workers share the host's windows."""
        self._lengths.seed()
        if not self.predicts or self.ctx.share > 1:
            return None, None
        return self._lengths.predict(self._served, limit, mono, on_wire)

    def _absurd(self, info: RateLimitInfo) -> str:
        """Why a stated limit cannot be meant (and so is no evidence), or ``""``."""
        p = self.ctx.policy
        if info.window is not None and info.window > p.max_hold:
            return f"a window of {info.window:.0f} s is longer than max_hold ({p.max_hold:g} s)"
        if info.limit is not None and info.window and info.limit / info.window > MAX_RATE:
            return f"{info.limit} requests per {info.window:g} s is more than any host answers"
        if info.reset_after is not None and info.reset_after > MAX_SECONDS:
            return f"a reset in {info.reset_after:.0f} s is later than any clock reaches"
        return ""


_Served = Deque[Tuple[float, float, bool, float]]  # (see StatedLimits._served)


class _Lengths:
    """The bounds ``(low, high]`` on the length of a host's windows that its answers agree
    on (see the module's model), and the resets they predict.

    Args:
        ctx: the host's shared state and settings.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        # The bounds; whether they may predict (no answer contradicted them, or answers
        # counting from another request agreed since); and the request the last bound
        # counted from (its answer).
        self._length: Optional[Tuple[float, float]] = None
        self._trusted = False
        self._bounded_from: Optional[float] = None

    def bound(self, served: _Served, count: int, stated: float, round_trip: float) -> None:
        """An answer ``round_trip`` s after its request counts ``count`` requests and states
        that the oldest leaves at ``stated`` (a whole second, rounded up): bound the windows'
        length from the ``count``-th most recent 2xx of ``served``, intersected with the
        bounds so far, or start again from these when they disagree.

        Only a request sent after a window ran out is counted from: the run's first request
        may fall anywhere in a window on the clock (or one another run opened), and a request
        sent right after a reset opens the next window wherever windows start.
        """
        if not 1 <= count <= len(served):
            return  # requests the run did not send are counted: nothing to count from
        old_sent, old_answer, after, _ = served[-count]
        if not after:
            return
        self.seed()
        low = stated - 1.0 - old_answer - round_trip
        high = stated - old_sent
        if self._length is not None:
            lo, hi = max(low, self._length[0]), min(high, self._length[1])
            if lo < hi:
                self._length = (lo, hi)
                self._trusted = self._trusted or old_answer != self._bounded_from
                self._bounded_from = old_answer
                return
        # The first bounds, or ones that contradict those so far (then they predict only once
        # a window counted from another request agrees).
        self._trusted = self._length is None
        self._length, self._bounded_from = (low, high), old_answer

    def probed(self, probe: float) -> None:
        """A probe at a window of ``probe`` s passed: the windows are at most that long."""
        if self._length is not None:
            self._length = (self._length[0], min(self._length[1], probe))

    def seed(self) -> None:
        """Start from the window the host's limit states (stated, or shown by an earlier
        probe), if nothing was bounded yet: the next run predicts from its first window."""
        limit = self.ctx.state.limit
        window = limit.window if limit is not None and limit.source == "stated" else None
        if self._length is None and window is not None and window >= 1.0:
            self._length = (window - 1.0, window)
            self._trusted = True

    def predict(
        self, served: _Served, limit: Optional[int], mono: float, on_wire: int
    ) -> Tuple[Optional[float], Optional[float]]:
        """When the window that ran out at ``mono`` (with ``on_wire`` of the run's other
        requests on the wire) frees a place, as the ``limit``-th most recent 2xx of
        ``served`` and the agreed length predict it, and the whole second probed (if the
        prediction is a probe); ``None`` when there is none or its moment has passed (the
        window does not count from the run's own requests).

        With ``on_wire`` requests on the wire (threads), the host may have counted them
        in the window, unanswered yet: at least ``limit - on_wire`` of the window's
        requests are answered, so the prediction counts from the ``(limit - on_wire)``-th
        most recent 2xx (one of the window's, sent no sooner than its oldest: late, never
        early; the ``limit``-th could be the window's before).

        Windows are whole seconds long. While a whole second lies inside the bounds, short of
        their upper end, a window of at most ``Tuning.reset_probe_below`` is probed at that
        length: windows opened at the same phase each time never narrow the bounds by
        themselves (a window of 1 s opened just after a whole second looks the same as one
        of 2 s on the clock). A probe that passes shows the window is that long; one refused
        stops predictions.
        """
        if not self._trusted or not limit or limit > len(served):
            return None, None
        assert self._length is not None
        low, high = self._length
        t = self.ctx.tuning
        # The longest whole second short of ``high`` (float noise aside): a window of 1 s
        # shown as at most 2 s is probed at 1 s, and one of 2 s shown as at most 2.03 s at 2.
        whole = float(math.ceil(high - 1e-6) - 1)
        inside = whole >= 1.0 and low < whole
        probe = whole if inside and high <= t.reset_probe_below else None
        oldest = served[-max(1, limit - on_wire)]
        at = oldest[1] + (high if probe is None else probe) + t.reset_margin
        return (at, probe) if at > mono else (None, None)


class _Refuted:
    """Answers saying none of a host's window remains until a reset further than
    ``max_sleep``, and the host's own answers that refute them.

    Such a reset is waited for ``max_sleep``, and the next request then goes before it, as a
    probe of the statement. A host that lets such probes through ``Tuning.refuted_resets``
    times in a row says ``remaining=0`` of windows that are not spent: its answers saying so
    are not waited for until it refuses, and it is paced by what it does. (Waited for, a host
    that said it on every 2xx, with a reset a day away, got one request per ``max_sleep``
    for good: 200 requests took 16 hours.) A quota that is spent refuses the probe, and
    stays waited for. The refutation is kept with the host's state
    (``HostState.stated_refuted``): the next run, and the workers sharing the store, start
    from it; a refusal ends it there too.
    """

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        # The stated reset (monotonic) the next request goes before; the probes let through
        # in a row.
        self._probing: Optional[float] = None
        self._count = 0

    def waits(self, reset: float) -> bool:
        """Whether an answer saying none remains until ``reset`` (monotonic, further than
        ``max_sleep``) is waited for (``max_sleep``, after which the next request probes
        it), or set aside as refuted."""
        if self.ctx.state.stated_refuted:
            return False
        self._probing = reset
        return True

    def served(self, sent: float, wall: float) -> None:
        """A 2xx to a request sent at ``sent`` (monotonic), answered at epoch ``wall``: a
        probe let through before the reset it probed refutes the statement; one sent at or
        after it does not."""
        if self._probing is None:
            return
        refuted, self._probing = sent < self._probing, None
        self._count = self._count + 1 if refuted else 0
        if self._count == self.ctx.tuning.refuted_resets:
            self._keep(True, wall)
            ENGINE_LOG.info(
                "%s: let requests through before the reset it stated for none remaining, "
                "%d times in a row; its statements of none remaining are not waited for "
                "until it refuses",
                self.ctx.host,
                self._count,
            )

    def refused(self, wall: float) -> None:
        """A rejection came (at epoch ``wall``): the statements stand again."""
        self._probing, self._count = None, 0
        if self.ctx.state.stated_refuted:
            self._keep(False, wall)

    def _keep(self, refuted: bool, wall: float) -> None:
        """Keep whether the statements are refuted with the host's state, as of ``wall``."""
        ctx = self.ctx
        ctx.state = ctx.state.replace(
            stated_refuted=refuted, stated_refuted_at=wall, updated_at=wall
        )
        ctx.dirty = True
