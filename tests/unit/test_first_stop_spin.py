"""``FirstStopSpin``: polling for a tick's first stop, and backing off where polling sees nothing (a target
queued on nprof's own CPU cannot stop while nprof polls). ``os.waitpid`` is scripted: this is the policy."""

from __future__ import annotations

from profiler.target import events
from profiler.target import ptrace as pt
from profiler.target.capture import TracerStats
from profiler.target.events import FIRST_STOP_BACKOFF_MAX, FirstStopSpin


def new_spin() -> tuple[FirstStopSpin, TracerStats]:
    stats = TracerStats()
    return FirstStopSpin(pt.Waiter(), stats), stats


def scripted_waitpid(monkeypatch, results):
    """``os.waitpid`` as the tracer's ``Waiter`` calls it, answering from ``results`` (the last one for ever); returns
    the list of calls made."""
    calls = []

    def waitpid(pid, flags):
        calls.append((pid, flags))
        return results.pop(0) if len(results) > 1 else results[0]

    monkeypatch.setattr(events.os, "waitpid", waitpid)
    return calls


def test_a_stop_that_comes_while_polling_is_returned(monkeypatch):
    calls = scripted_waitpid(monkeypatch, [(0, 0), (0, 0), (42, 0x857F)])
    spin, stats = new_spin()
    assert spin.poll() == (42, 0x857F)
    assert len(calls) == 3 and (stats.first_stop_polls_caught, stats.first_stop_polls_missed) == (1, 0)


def test_polls_that_see_nothing_back_off_longer_each_time_up_to_the_bound(monkeypatch):
    monkeypatch.setattr(events, "FIRST_STOP_SPIN_NS", 0)  # one look per poll
    calls = scripted_waitpid(monkeypatch, [(0, 0)])
    spin, stats = new_spin()
    polled_at = []
    for tick in range(400):
        before = len(calls)
        assert spin.poll() == (0, 0)
        if len(calls) > before:
            polled_at.append(tick)
    gaps = [b - a for a, b in zip(polled_at, polled_at[1:])]
    assert gaps[:6] == [3, 5, 9, 17, 33, 65]  # 2, 4, 8, ... ticks skipped after each miss in a row
    assert max(gaps) == FIRST_STOP_BACKOFF_MAX + 1
    assert stats.first_stop_polls_missed == len(polled_at) and stats.first_stop_polls_caught == 0


def test_a_stop_seen_again_ends_the_back_off(monkeypatch):
    monkeypatch.setattr(events, "FIRST_STOP_SPIN_NS", 0)
    calls = scripted_waitpid(monkeypatch, [(0, 0), (0, 0), (7, 0x857F), (0, 0)])
    spin, stats = new_spin()
    polled_at = []
    for tick in range(13):
        before = len(calls)
        if spin.poll() == (7, 0x857F):
            assert tick == 8  # polled at 0 and 3 (misses, skipping 2 then 4 ticks), then caught at 8
        if len(calls) > before:
            polled_at.append(tick)
    # after the catch, a miss skips 2 ticks again, not 8
    assert polled_at == [0, 3, 8, 9, 12] and (stats.first_stop_polls_caught, stats.first_stop_polls_missed) == (1, 4)
