"""Every threshold of the learning engine, in one frozen, documented place.

The engine (:mod:`requests_retryafter.engine`) reads its constants from a :class:`Tuning`
only; :data:`TUNING` is the one the adapter uses. What a user may set (the floor, the ceiling,
the budgets, ``plausible_wait``, ``utilization``) is :class:`~requests_retryafter.Policy`'s;
these are the engine's own judgements, each with the reason it has the value it has. None
exists because one benchmark scenario needed it: a change here is judged on the whole sweep
(``benchmarks/bench_portals.py --sweep``) and the real-nginx benchmark.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

__all__ = ["TUNING", "Tuning"]


@dataclass(frozen=True)
class Tuning:
    """The engine's thresholds. Times are seconds; shares are fractions.

    Corroboration and episodes:

    Attributes:
        countdown_probe: a second header is compared with the first at least this long after
            it, and a long header seen for the first time is probed no sooner: headers are
            whole seconds, so a second on a countdown reads at least one less, a constant one
            the same. (The floor spaces retries so already; a longer probe would also make
            the recovery seen at it look that long.)
        countdown_tolerance: a second header counts down to the same reset as the first when
            the moments they imply are this close (each is rounded to a whole second).
        reset_agrees: a reset the host states corroborates a header within this many seconds
            of it, ...
        reset_agrees_share: ... or within this share of the header, if that is more (resets
            and headers are rounded separately, and a long one may be computed a little apart).
        stale_episode: an episode that has seen no 2xx for this long is closed unrecovered:
            what began it says nothing about the host any more.
        scattered_headers: headers of one episode are *scattered* (a hint only) once this
            many varying ones point at reset moments far apart, ... (or two, once the host
            still refused when an obeyed one said it would be ready: the header was shown
            wrong in the episode), ...
        scattered_spread: ... more than this many seconds apart, ...
        scattered_share: ... or this share of their median, if that is more. Less is the
            rounding of a countdown.
        constant_spread: headers within this factor of each other are one constant value
            (judged as overstated or not elsewhere), not scattered.
        missed_headers: an episode's header is a hint once the host still refused this many
            times when an obeyed one said it would be ready, whatever it says next. Once is
            a header rounded down (missed by a second, then right); twice, a header that is
            wrong: a constant ``Retry-After: 1`` on a window of a minute, obeyed each
            second until the call's attempts ran out, gave up 4 calls of a 200-request crawl
            with 47 refused (``Retry-After: 0``, own backoff from the first, gave up 1 with
            17 refused).

    Own waits:

    Attributes:
        jitter: waits drawn from evidence (a learned recovery), and with workers sharing
            the host an obeyed wait at the floor, are stretched by up to this share at
            random, so that workers do not retry together.
        backoff_span: own backoff without evidence is capped also at this many times the
            time the episode has lasted, ...
        backoff_low: ... and drawn from this share of its cap up to the cap (equal jitter):
            each retry then comes 1.5 to 2 times as far into the episode as the one before, a
            randomised doubling search for the recovery. The first success comes at most
            twice as late as the recovery (1.35 times on average), after refusals that grow
            with the logarithm of its length; the half left to chance still keeps workers
            from retrying together. Full jitter (``uniform(0, cap)`` with the cap at twice the
            time) overshot up to three times on one client: 34 s drawn after 19.5 s of
            refusals on a 20 s window. The cost is reach: floored at 1 s, six attempts get
            about 10 s into an episode (full jitter's about 15 s), so a call has ten by
            default (``Policy.max_attempts``), which get past a minute.
        drift_header: at a paced window's first request, an unproven header asking for more
            than this share of the window contradicts what was learned and is probed instead.
        unreliable_stretch: an unreliable header may stretch own backoff up to this many
            times, no further: a value uncorrelated with recovery carries no evidence for a
            longer wait. (Nor past the cap of own backoff's search step: the first success
            then still comes at most twice as late as the recovery.)
        truthful_reach: a host judged truthful is obeyed up to this many times its longest
            recovery seen (or ``plausible_wait``): far beyond is a different event.

    Windows:

    Attributes:
        lean_early: a recovery found by probing lies between the last refusal and the first
            success; it is taken this share of the way from the first success back towards
            the refusal. A window taken too short shows itself in a refusal and grows; one
            taken too long only ever wastes time.
        relearn_windows: a refusal lasting more than this many windows (plus the floor)
            means the short window was a misreading, learned again from what the host let
            through since it last turned (a recovery not over at the first retry).
        sporadic_floors: a refusal at a window's first request over within this many floors
            is sporadic (the host's load, another client) and changes nothing, unless ...
            (and a recovery so soon over is no turn of the host's window to relearn a
            window from: see ``relearn_windows``)
        sporadic_repeat: ... such refusals come again within ``probe_after_periods`` windows;
            if the window grew for them and they still come as often per request (up to this
            factor), the pace was not their cause and the window is put back.
        random_again: a refusal partway through a window's budget that the first retry at
            the floor got past is taken for one at random (no window start, nothing learned)
            unless it came within this many times the requests that the budget allows a
            floor (``burst * floor / window``) of the last such one: a sliding window
            counter's headroom regrows at its rate, so it refuses again within about that
            many (twice, for the floor's slack); one at random, one in hundreds.
        round_periods: window lengths servers use (a second, a minute, an hour and the steps
            between). A learned window within ``round_tolerance`` of one, whose window starts
            fit one lattice of that period, is taken to be exactly that long and in that phase
            (on trial where it is longer than the episode that located it measured: see
            ``narrow_periods``). A counter's window shut by a run's opening is taken to
            turn on the nearest of them to the opening over the rate (``_opening``).
        round_tolerance: see ``round_periods`` (twice this where the episode's evidence allows
            the round period).
        bracket_share: only window starts located within this share of the period (between
            the last refusal and the first success) say where in the period windows start;
            and own backoff's search retries at the ends of round windows from the last
            recovery only for the periods it so locates.
        round_refused: a host that still refuses at such a round end has a longer window,
            or is a counter still weighing what it counted (HAProxy's counter of 100 per 60 s
            frees a place about 5 s after the minute, its first burst and the refusals it
            counted weighed in); own backoff's search then counts the episode from this share
            of the way to that end, so its next step is at most half as far as that end was
            into the episode. Counted from the episode's start, the next step went to the
            next round end, 120 s, and the window was learned as 75 s, 0.8 of the rate.
        host_lattice: the lattice is the host's own (a clock minute), not of our own bursts,
            if a window start the lattice allows came sooner than this share of a window
            after a recovery (a lattice of our making drifts, and the starts it allows can
            come up to a few percent of a window sooner than ours did); for a worker alone,
            a recovery that came sooner than a window after the cycle's first request went
            proves it. A run's first window on a fixed window is searched for its turn
            where a stored recovery came sooner than this share of a window after its
            cycle's first request (``_opening``): a window learned long, its recovery found
            late, would show a sliding window's first recovery as sooner than a window.
        lattice_odds: where the window starts located fit two lengths the time between
            recoveries allows, the one whose lattice leaves them this many times the share
            of its phases the other leaves is taken (the odds that they fit it by more than
            chance); otherwise neither. Brackets of 10..15 s and 34.9..42.4 s leave 2.4 s of
            a 30 s lattice and 0.4 ms of a 20 s one.
        located_margin: a request that waits for the start of a window located on the
            clock goes this much after it: sent at the very moment, one early by the
            rounding of epoch seconds or a millisecond of jitter was refused, and its header
            (0, a whole second) then read as window starts coming later, which grew the
            window. (Five milliseconds: half a percent of a 1 s window's rate.) So does the
            request after a run's opening, waiting for the window the opening shut to turn
            (a window the opening's first request opened began when it arrived).
        partial_tries: a run's first window on a fixed window of the host's own, in no
            phase located, turns anywhere in the window after the run's first request; the
            request after its budget is tried at once and then this many times, evenly
            over that window, before its end (``_opening``). The turn is found at most a
            quarter of a window late, where a run waited up to a whole window, for at most
            four refusals a run: a run with nothing stored paid 2 to 13 finding the same
            turn by doubling (the sweep's windows of 45 and 90 s).
        reuse_margin: a request of a window's budget goes no sooner than a window and this
            much after the budget's worth before it (on windows located on the clock too,
            but in a period ``reuse_late`` begun): a sliding window (a log of the last
            window's requests) refuses a request that reaches it a hair less than a window
            after the one it replaces, and two requests' latencies (and a sleep's overshoot)
            differ by a millisecond or so on a LAN. It costs this much a window: half a
            percent of a 1 s window's rate.
        reuse_late: on windows located on the clock, a period whose first request went
            this much or more after its start (one begun by a recovery found by own
            backoff, or at the end of a hold or a maintenance) is not held in the pacer's
            log, nor is a run's first: an obeyed header ends within its last whole second
            of where a sliding window frees a place, and such a period says nothing of it;
            on a fixed window its requests would hold the next window's budget, which the
            window lets through at its start (held, a recovery 29 s into a minute's window
            held it 29 s).

    Pacing and probing:

    Attributes:
        probe_step: an upward probe adds this share (at least one request) to a learned
            window's budget, ... A cut of more than this share is tried back
            (``LimitEstimate.peak``): a smaller one, a probe's step covers.
        probe_max_step: ... doubling after each probe that held, up to this share. Spread
            evenly, a worker alone's next step follows at once after one that held, until one
            is refused (TCP's slow start): spaced as below, one step each, the probes left a
            sliding window counter at the budget over the window first measured (0.78 of a
            10 per 1 s counter's rate) for 18 s of a 38 s crawl.
        probe_after_periods: ... after this many periods used in full without a refusal; a
            refused probe (and a search bounded by one, when it ends) doubles the wait for
            the next, up to ``probe_max_periods``.
        probe_max_periods: see ``probe_after_periods``.
        probe_min_seconds: ... and at least this long after the last probe (doubling with the
            periods): a short window is probed no more often than a long one.
        search_gap: a budget learned as a lower bound (the host had recovered by the first
            retry) doubles at each probe until one is refused (TCP's slow start: a limit ten
            times the first estimate is found in four probes), then the probes bisect the gap
            geometrically until the refused budget is within this factor of the one that
            holds: within 10 %, a refusal costs more than what a further probe could gain.
            Spread evenly, one request more a window refused further above the budget that
            holds is halved: the next probe goes in a window twice as long.
        narrow_periods: a window measured between a refusal and a later recovery is an
            upper bound (so is a round lattice longer than the episode that located it
            measured: only the time between recoveries allowed it), narrowed by probing the
            geometric middle of it and the window back to that refusal
            (``LimitEstimate.shortest``) until the two are within ``search_gap``, each
            probe after a period whose first request went within ``search_gap`` of its
            start; a shorter window is kept once this many periods in a row at its
            length went without a refusal. On a host whose windows follow the clock, a
            period starts late by as much as the recovery that began them was found late,
            and one period at a window too short can pass; two pass only if it is too short
            by less than half that lateness.
        spread_below: a host whose learned window is shorter than this and that shows itself
            a token bucket (it refused a deeper burst whatever the rate, yet let the first
            retry through) is paced evenly: nginx's ``limit_req`` refuses any burst deeper than
            itself. Workers sharing a host pace any window shorter than this evenly, on their
            shared schedule: each sees only its share of a window, so none can tell a short
            window from a bucket. A refusal inside a period of a window at least this long is
            retried first at the floor: a window whose budget ran out stays shut longer, so
            a host that lets that retry through refused for another cause.
        spread_decrease: spread evenly, a budget refused outside a probe is cut to this share
            (the multiplicative decrease of TCP and botocore's adaptive mode), or by less:
            by the share of requests over the host's rate, as the requests let through since
            the last refusal show it (see ``_learner._cut``). On the shared
            schedule of workers, a rate refused after it held for ``spread_probe_hold``
            steps one ``probe_step`` down instead: near the host's rate a refusal comes at
            random (a request late by a few milliseconds, then one on time), as a worker
            alone's window loses one request; refused again within that time, it is cut.
        spread_probe_hold: spread evenly, a probe must hold this long, or long enough to empty
            a bucket as deep as the host's can be at the probe's excess, before it is kept: a
            bucket absorbs an excess rate until it is empty (a refusal sooner than that shows
            the bucket was not full: the rate the probe started from, where the probe before
            it raised it, was draining it). On a
            sliding window counter, long enough to fill its headroom instead: a window, and
            the time the excess takes to add up to one request. While a lower bound is
            doubled, two gaps at the probe's pace instead of this (judged at each request):
            a probe far past the rate is refused within it; two of the probe's requests must
            have waited for their place (a probe the client does not reach holds after this
            long at the client's own pace, and ends the search). Near the rate, a
            refusal comes at random (a busy machine's jitter against a bucket without a
            burst): a rate kept sooner was refused again and again, and each refusal cut it
            by ``spread_decrease``. After a cut, the pace holds this long without a refusal
            before a probe goes back to the rate before it, and that probe holds this long
            (``LimitEstimate.peak``): that rate held before the cut.
        probe_hold_max: the longest any probe must hold (four of ``probe_min_seconds``).

    Stated resets:

    Attributes:
        reset_margin: a place predicted to free (:mod:`requests_retryafter._stated`: the
            ``limit``-th most recent 2xx's answer plus the longest window length the answers'
            bounds allow) is waited for this much longer: the bounds hold for the moments the
            server counted, and its clock and the rounding of its statements are its own.
            (A hundredth of a 1 s window, against the up to a second that waiting for a reset
            rounded up costs.)
        reset_probe_below: windows no longer than this, whose length the answers bound only
            within a second, are probed once at the longest whole second short of the bounds'
            upper end (a refused probe stops predictions): waiting for a reset rounded up
            costs up to a second a window, a tenth of the rate or more on these; on longer
            ones a refusal costs more than the second could gain.
        reset_history: the 2xx kept per host to find the oldest request a window counts; a
            window of more requests is never predicted, only its stated reset waited for:
            the second that rounding costs is then shared by as many requests (and a host's
            memory stays a few kilobytes).
        refuted_resets: answers saying none of a host's window remains until a reset further
            than ``max_sleep`` are waited for only that long (the next request goes then, as
            a probe of the statement); once the host let such a probe through this many
            times in a row, with no refusal, its answers saying none remains are not waited
            for until it refuses (:mod:`requests_retryafter._stated`). Two, as a long
            header is trusted after two rejections that agree: one may be a reset that came
            early; a host that says it on every 2xx (a reset a day away) was otherwise sent
            one request per ``max_sleep`` for good.
        trial_after: answers saying none of a host's window remains (run-outs, with no
            refusal between them) over which the rate its statements gave is measured before
            an even pace is tried (:mod:`requests_retryafter._stated_trial`); doubled after
            each trial that failed. Three: the measurement runs from the first to the last,
            two whole cycles of burst and wait (one can be short or long by chance: a reset
            rounded up or not), about two seconds on windows of a second.
        trial_idle: a run-out counts only if the next request went within this long of the
            end of the wait for the reset: a client that came back later was busy or paused,
            not held back by the statements, and an even pace would not make it faster
            (bursts to a 20 per 10 s window with pauses of 25 s took 10 s each, paced
            evenly, instead of no time). A sleep overshoots by a millisecond or so, a busy
            machine's by tens.
        trial_gain: an even pace is tried only where ``utilization`` of the stated rate is at
            least this many times what the statements gave, and kept only where its answers
            came at least this many times as fast. Measured twice, the same pace differs by a
            few per cent (a reset rounded up or not, a late wake); a host whose statements
            pace it at its rate (a window that frees its budget at the reset it states, and
            states it closely) gives more to them than to an even pace, and is never tried.
        date_ahead: a host's clock is read ahead of this machine's where its answers'
            ``Date`` show it more than this many seconds ahead (``_server_clock``). Up to a
            second ahead, a stated reset read on this machine's clock is late by no more
            than its own rounding up; further ahead, by more (30 s ahead, a host of 5
            requests a second was waited for 30 s after each window).
        date_behind: ... and behind where they show it more than this many seconds behind.
            Up to a second behind, a stated reset read on this machine's clock is early by
            less than its rounding up makes it late; further behind, it is early, and
            requests sent at it are refused.
        date_answers: the bounds on a host's clock offset are those of its last this many
            answers with a ``Date`` that stated a limit or refused: the more answers, the
            closer the bounds (each answer's ``Date`` is truncated to a whole second at a
            moment of its own), and a clock that its operator set right shows within as
            many answers.

    The shared search of workers pacing one host together (:mod:`requests_retryafter._search`)
    uses the same figures on its rate: ``search_gap``, ``spread_decrease``, ``probe_step``,
    ``probe_min_seconds`` (doubled by each refused probe up to
    ``probe_max_periods / probe_after_periods`` times), ``spread_probe_hold`` and
    ``probe_hold_max``.
    """

    countdown_probe: float = 1.0
    countdown_tolerance: float = 1.5
    reset_agrees: float = 2.0
    reset_agrees_share: float = 0.1
    stale_episode: float = 6 * 3600.0
    scattered_headers: int = 3
    scattered_spread: float = 10.0
    scattered_share: float = 0.5
    constant_spread: float = 1.1
    missed_headers: int = 2

    jitter: float = 0.1
    backoff_span: float = 1.0
    backoff_low: float = 0.5
    drift_header: float = 0.5
    unreliable_stretch: float = 2.0
    truthful_reach: float = 4.0

    lean_early: float = 0.75
    relearn_windows: float = 2.0
    sporadic_floors: float = 1.5
    sporadic_repeat: float = 1.5
    random_again: float = 2.0
    round_periods: Tuple[float, ...] = (
        1.0,
        2.0,
        5.0,
        10.0,
        15.0,
        20.0,
        30.0,
        60.0,
        120.0,
        300.0,
        600.0,
        900.0,
        1800.0,
        3600.0,
    )
    round_tolerance: float = 0.05
    bracket_share: float = 0.25
    round_refused: float = 0.5
    host_lattice: float = 0.9
    lattice_odds: float = 10.0
    located_margin: float = 0.005
    reuse_margin: float = 0.005
    reuse_late: float = 1.0
    partial_tries: int = 3

    probe_step: float = 0.05
    probe_max_step: float = 0.5
    probe_after_periods: int = 8
    probe_max_periods: int = 256
    probe_min_seconds: float = 20.0
    search_gap: float = 1.1
    narrow_periods: int = 2
    spread_below: float = 5.0
    spread_decrease: float = 0.75
    spread_probe_hold: float = 5.0
    probe_hold_max: float = 80.0

    reset_margin: float = 0.01
    reset_probe_below: float = 10.0
    reset_history: int = 256
    refuted_resets: int = 2
    trial_after: int = 3
    trial_idle: float = 0.1
    trial_gain: float = 1.1
    date_ahead: float = 1.0
    date_behind: float = 1.0
    date_answers: int = 32


#: The tuning the adapter uses.
TUNING = Tuning()
