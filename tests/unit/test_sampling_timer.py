"""The tick schedule: jittered periods, and what a sampler that falls behind does next."""

from __future__ import annotations

from profiler.sampling.timer import JITTER, Timer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_intervals_are_jittered_within_bounds():
    clock = Clock()
    timer = Timer(1000.0, seed=1, clock=clock)
    due = timer.next_due
    steps = []
    for _ in range(500):
        nxt = timer.advance()
        steps.append(nxt - due)
        due = clock.now = nxt
    assert min(steps) >= (1 - JITTER) * 1e-3 - 1e-12 and max(steps) <= (1 + JITTER) * 1e-3 + 1e-12
    assert max(steps) - min(steps) > 0.5e-3, "the period is jittered"
    assert timer.late_ticks == 0 and timer.missed_ticks == 0


def test_a_sampler_that_fell_behind_ticks_at_once_without_a_burst():
    clock = Clock()
    timer = Timer(1000.0, seed=2, clock=clock)
    clock.now += 0.050  # a tick took 50 periods
    assert timer.advance() == clock.now, "the next tick is due now, not a period later"
    assert timer.late_ticks == 1
    assert 48.5 - 1e-9 <= timer.missed_ticks <= 49.5 + 1e-9, "the ticks due in the 50 periods, but the one taken"
    nxt = timer.advance()  # on time again: one jittered period on, no catch-up burst
    assert clock.now + (1 - JITTER) * 1e-3 - 1e-12 <= nxt <= clock.now + (1 + JITTER) * 1e-3 + 1e-12
