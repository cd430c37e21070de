"""Windows on the clock: which window starts locate a host's lattice (``_lattice.aligned``)."""

from __future__ import annotations

import random
from typing import Optional, Sequence, Tuple

import pytest

from requests_retryafter import HostState, Observation, Policy
from requests_retryafter._context import HostContext
from requests_retryafter._lattice import aligned
from requests_retryafter.tuning import TUNING

BASE = 1_700_000_020.0  # 10 s into a 30 s period of epoch time, at a 20 s boundary


def episode(
    at: float, failed: float, recovered: float, served: int = 100, span: float = 0.0
) -> Observation:
    """A 429 at ``BASE + at`` without a usable header, last refused at ``BASE + failed``,
    answered 2xx again at ``BASE + recovered``, after ``served`` successes in ``span`` s."""
    return Observation(
        at=BASE + at,
        status=429,
        header=None,
        recovered=recovered - at,
        failed_until=failed - at,
        served=served,
        span=span,
    )


def align(
    episodes: Sequence[Observation],
    window: float,
    cycle: Optional[Tuple[float, float]] = None,
    share: int = 1,
) -> Optional[Tuple[float, Optional[float]]]:
    """What ``aligned`` makes of ``episodes`` (the last one just ended) and a learned window,
    for a worker among ``share``."""
    *before, last = episodes
    state = HostState(host="portal.example").replace(observations=tuple(before))
    ctx = HostContext(state, Policy(), random.Random(0), "w", TUNING)
    ctx.share = share
    wall = last.at + (last.recovered or 0.0)
    return aligned(ctx, window, window, window, last, wall, cycle)


def phase_of(found: Optional[Tuple[float, Optional[float]]], period: float) -> float:
    """Seconds past ``BASE`` (mod ``period``) of the window start ``aligned`` kept, once it
    found that ``period`` and kept a start."""
    assert found is not None
    assert found[0] == period
    assert found[1] is not None
    return (found[1] - BASE) % period


def test_wide_brackets_that_agree_on_the_lattice_locate_its_start():
    # 100 per 30 s on the clock (starts at BASE + 20, + 50, ...), no usable header. Each
    # episode's retries found the window start late: neither bracket alone (10 s, 17 s) is
    # narrow enough to locate it, but on a 30 s lattice only 16.9..20 s of the first
    # bracket fits the second one too: the window start is located.
    found = align([episode(0.0, 10.0, 20.0), episode(31.0, 46.9, 63.9)], window=30.7)
    assert found is not None
    period, anchor = found
    assert period == 30.0
    assert anchor is not None
    # The latest start the evidence allows: at or after the real one, never before it.
    assert 0.0 <= (anchor - BASE - 20.0) % 30.0 <= 0.25 * 30.0
    assert anchor <= BASE + 63.9


def test_a_period_every_bracket_fits_is_preferred_to_one_only_the_narrow_ones_fit():
    # 60 per 20 s on the clock, starting at 4 s past each 20 s boundary; the first window
    # seen was partial, so the learned window is 15 s. A 15 s lattice fits the one narrow
    # bracket, not the two wider ones: a clock window of 15 s would have started in them.
    # The 20 s lattice that the time between recoveries allows fits all three.
    episodes = [
        episode(0.0, 2.1, 5.8, served=60),
        episode(8.4, 20.2, 30.6, served=60, span=2.5),
        episode(35.8, 41.4, 47.5, served=60, span=5.2),
    ]
    found = align(episodes, window=15.0, cycle=(10.8, 27.2))
    assert 0.0 <= (phase_of(found, 20.0) - 4.0) % 20.0 <= 0.25 * 20.0


def test_a_sliding_windows_late_recovery_does_not_undo_a_length_its_starts_fit():
    # A sliding window of 20 s paced from our recoveries: the narrow brackets fit a 20 s
    # lattice (of our own making); a recovery found late (5.5 s wide) does not, and is no
    # window start. The length is still taken, without a phase to keep.
    episodes = [
        episode(28.0, 33.0, 38.5, served=30, span=11.3),
        episode(59.7, 60.7, 62.6, served=30, span=17.9),
        episode(80.5, 81.5, 83.4, served=30, span=17.9),
    ]
    assert align(episodes, window=19.5) == (20.0, None)


@pytest.mark.parametrize(("overlap", "located"), [(6.0, True), (9.0, False)])
def test_wide_brackets_locate_a_start_only_where_they_leave_a_quarter_of_the_period(
    overlap, located
):
    # Two wide brackets whose overlap on the 30 s lattice is 6 s (a fifth) or 9 s (more
    # than a quarter, TUNING.bracket_share): only the first locates a window start.
    assert (overlap <= TUNING.bracket_share * 30.0) is located
    wide = episode(0.0, 10.0, 20.0), episode(31.0, 50.0 - overlap, 63.9)
    found = align(wide, window=30.0)
    assert (found[0] if found else None) == (30.0 if located else None)


def test_the_lattice_can_show_a_start_too_soon_after_our_first_request_to_be_ours():
    # 60 per 20 s on the clock, starting 9.9 s past each 20 s boundary; the run's first 60
    # requests at 0 s were refused, and the first retry that got through came at 21 s. A
    # start after 8.8 s, or as late as 21 s, could be our own window's end; but the second
    # episode's bracket leaves only 8.8..13.3 s of it on a 20 s lattice: sooner after our
    # first request than a whole window, so the lattice is the host's, and kept with its
    # phase for the next run.
    episodes = [
        episode(0.0, 8.77, 21.03, served=60),
        episode(41.41, 48.49, 53.28, served=120, span=20.38),
    ]
    found = align(episodes, window=20.0)
    assert 9.87 <= phase_of(found, 20.0) <= 9.87 + 0.25 * 20.0


def test_window_starts_that_fit_two_lengths_the_cycle_allows_pick_neither():
    # 30 per 15 s on the clock (starts at BASE + 5, + 20, ...). Two recoveries found late
    # bracket 5 s (1..5.3 s) and 20 s (16.4..21.3 s); the time between them allows 15 s or
    # 20 s. On a 20 s lattice the brackets meet by chance (within 1..1.3 s), on the host's
    # 15 s one they overlap too widely to locate a start: the evidence fits both lengths,
    # so it is no lattice (taken as 20 s, the host was paced at three quarters of its rate,
    # and the next run too).
    episodes = [
        episode(0.0, 1.0, 5.3, served=30),
        episode(10.2, 16.4, 21.3, served=30),
    ]
    found = align(episodes, window=12.1, cycle=(10.9, 20.1))
    assert found is None


def test_a_retry_sooner_than_the_header_brackets_the_whole_wait():
    # 60 per minute on the clock (starts at BASE + 20, + 80, ...), Retry-After: 3600 on every
    # 429, clamped to what the host showed: the first episode's one retry came 6.5 s after
    # its refusal, long before the header's hour. Its window start lies anywhere in those
    # 6.5 s (it was at 20 s), not in the last second before the retry, as it would after
    # an obeyed header. With the second episode's narrow bracket, the minute's lattice fits.
    clamped = Observation(
        at=BASE + 16.0, status=429, header=3600.0, recovered=6.5, served=60, span=1.0
    )
    found = align([clamped, episode(75.0, 79.5, 80.6, served=60, span=1.0)], window=59.0)
    assert found is not None
    assert found[0] == 60.0


@pytest.mark.parametrize(("share", "proved"), [(1, True), (4, False)])
def test_a_recovery_sooner_than_a_window_after_the_cycle_began_proves_the_lattice_the_hosts(
    share, proved
):
    # 60 per 20 s on the clock (starts at BASE + 18.2, + 38.2, ...), Retry-After: 0. The
    # run's first episode, from its first request at 0 s, brackets a start in 15..20 s:
    # that might be the end of a window our first request opened. The next cycle began at
    # that recovery (20 s), and its episode recovered at 38.25 s, 18.25 s later: sooner than
    # a window that the cycle's first request opened could end. For a worker alone, the
    # lattice is the host's, and its phase is kept for the next run; one of four workers
    # cannot tell (another's request may have opened the window sooner).
    episodes = [
        episode(0.0, 15.0, 20.0, served=60),
        episode(25.0, 37.25, 38.25, served=60, span=5.0),
    ]
    found = align(episodes, window=20.0, share=share)
    if proved:
        assert 17.25 <= phase_of(found, 20.0) <= 18.25 + 1e-6
    else:
        assert found == (20.0, None)


def test_a_start_a_whole_window_after_our_first_request_may_be_our_own():
    # A window of 20 s that our first request opened (at 0 s) ends at 20 s and a hair: the
    # retry at 20.1 s got through after a refusal at 19.5 s. Starts on a lattice of our own
    # making: the length is taken, without a phase to keep.
    episodes = [
        episode(0.0, 19.5, 20.1, served=60),
        episode(25.0, 39.6, 40.2, served=60, span=4.9),
    ]
    assert align(episodes, window=20.0) == (20.0, None)


def test_window_starts_that_fit_one_length_far_better_than_another_pick_it():
    # 100 per 30 s on the clock (starts at BASE + 12, + 42, ...), Retry-After: 3600 clamped.
    # Two recoveries found late bracket 10..15 s and 34.9..42.4 s; the time between them
    # allows a window of 20 s or 30 s. On a 30 s lattice the brackets leave 2.4 s of its
    # phase (a start between 10 and 12.4 s); on a 20 s lattice they meet only within 0.1 s
    # (at 14.9..15 s), a coincidence 16 times less likely. Taken as 30 s, the next run
    # sends each window's budget at the window's start, not a learned 22 s after its last.
    episodes = [
        episode(0.0, 10.0, 15.0, served=100),
        episode(25.6, 34.9, 42.4, served=100, span=10.6),
    ]
    found = align(episodes, window=21.9, cycle=(19.9, 32.4))
    assert 12.0 <= phase_of(found, 30.0) <= 12.4 + 1e-6
