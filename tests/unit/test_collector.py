"""The sampler's use of the garbage collector's permanent generation (``profiler/sampling/gc_freeze.py``):
survivors are frozen at the start and once per interval, everything is handed back at the end, and a process
that manages its own permanent generation is left alone."""

from __future__ import annotations

import gc

import pytest

from profiler.sampling.gc_freeze import FREEZE_INTERVAL, SurvivorFreezer


@pytest.fixture(autouse=True)
def thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_survivors_are_frozen_while_sampling_and_handed_back_after():
    freezer = SurvivorFreezer()
    freezer.start(100.0)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    kept = [[i] for i in range(1000)]  # long-lived, like the stack memo's entries
    freezer.tick(100.0 + FREEZE_INTERVAL / 2)
    assert gc.get_freeze_count() == frozen  # not due yet
    freezer.tick(100.0 + FREEZE_INTERVAL)
    assert gc.get_freeze_count() >= frozen + len(kept)
    freezer.stop()
    assert gc.get_freeze_count() == 0


def test_young_cyclic_garbage_is_collected_before_a_freeze_not_kept():
    freezer = SurvivorFreezer()
    freezer.start(0.0)
    collected = []

    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

        def __del__(self) -> None:
            collected.append(True)

    Node()
    freezer.tick(FREEZE_INTERVAL)
    assert collected, "the young collection before the freeze freed the cycle"
    freezer.stop()


def test_a_process_that_froze_objects_itself_is_left_alone(monkeypatch):
    """Neither frozen more nor unfrozen. (Its frozen objects may still be freed meanwhile by another thread of
    the process, as pytest-xdist's worker has: the count only says that none was added, nor all handed back.)"""
    gc.freeze()
    theirs = gc.get_freeze_count()
    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
    freezer = SurvivorFreezer()
    freezer.start(0.0)
    freezer.tick(FREEZE_INTERVAL)
    freezer.stop()
    assert calls == []
    assert 0 < gc.get_freeze_count() <= theirs


def test_nothing_is_done_with_the_collector_disabled():
    gc.disable()
    try:
        freezer = SurvivorFreezer()
        freezer.start(0.0)
        freezer.tick(FREEZE_INTERVAL)
        assert gc.get_freeze_count() == 0
        freezer.stop()
    finally:
        gc.enable()
