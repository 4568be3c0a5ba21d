"""Dormant threads (``profiler/sampling/dormancy.py``) on a live target: a thread asleep for long is not
read at every tick, yet the tick after it wakes and runs stops it, a thread started meanwhile is found
although the process's thread list is no longer listed at every look, and every tick's sample of a dormant
thread reaches the session."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from profiler.config import SamplerConfig, SamplingPriority
from profiler.model import SampleClass
from profiler.profile.session import Session, SessionMeta
from profiler.sampling.dormancy import MIN_THREADS
from profiler.sampling.frame_names import name_frames
from profiler.sampling.sampler import EndReason, Sampler
from profiler.target import threads as threads_module
from tests.support.elf32 import write_i386_binary
from tests.support.targets import assert_running_free, running_target

RATE = 200.0
SLEEPERS = 48  #: threads asleep for good (above ``MIN_THREADS``)
WORK = 1.2  #: seconds recorded after the worker is told to work: alone for 0.6 s (dormant.c's ALONE_NS), then
#: beside the thread it starts
GIVE_UP = 20.0  #: seconds without the worker going dormant before the test fails


def record_through_a_wake(dormant_fp: str, idle: bool, quiet: int, after: float, *more_argv: str):
    """Record tests/targets/dormant.c (``more_argv`` after its thread count) until the worker has been dormant
    for ``quiet`` quiet ticks, tell it to go, and record ``after`` seconds more (or until the process leaves).
    Returns the sampler, its session (symbolized), the tick and quiet-tick counts at the go, and the
    process's ``Dormancy``."""
    go_read, go_write = os.pipe()
    try:
        with running_target([dormant_fp, str(go_read), str(SLEEPERS), *more_argv], pass_fds=[go_read]) as target:
            session = Session(SessionMeta(pid=target.pid, command=[dormant_fp]))
            config = SamplerConfig(rate=RATE, priority=SamplingPriority.NORMAL, interrupt_sleeping=idle)
            sampler = Sampler(session, config)
            told: dict[str, float | int] = {}
            begun = time.monotonic()

            def should_stop() -> bool:
                now = time.monotonic()
                if not told:
                    dormancy = added.dormancy
                    worker = [r for r in dormancy.dormant if r.name == "worker"] if dormancy else []
                    if worker and dormancy.quiet_ticks >= quiet:
                        os.write(go_write, b"!")  # the worker has slept ~1 s, unread for a while: wake it
                        told.update(at=now, tick=sampler.ticks, quiet=dormancy.quiet_ticks)
                    return now - begun > GIVE_UP
                return now - told["at"] > after

            try:
                added = sampler.add_process(target.pid, trace_exec=True)
                for _tick in sampler.run(should_stop):
                    pass
                name_frames(session, sampler.modules.objects)
            finally:
                sampler.close()
            assert_running_free(target.pid)
    finally:
        os.close(go_read)
        os.close(go_write)
    assert told, "the worker never went dormant"
    return sampler, session, told, added.dormancy


@pytest.mark.parametrize("idle", [False, True], ids=["default", "idle"])
def test_a_dormant_thread_that_wakes_is_sampled_at_work(dormant_fp, idle, monkeypatch):
    assert SLEEPERS + 2 >= MIN_THREADS
    listings = []
    real_listing = threads_module.list_threads

    def counted_listing(pid: int) -> list[int]:
        listings.append(pid)
        return real_listing(pid)

    monkeypatch.setattr(threads_module, "list_threads", counted_listing)
    sampler, session, told, dormancy = record_through_a_wake(dormant_fp, idle, 10, WORK)
    assert dormancy.quiet_ticks > told["quiet"]  # the sleepers stayed dormant after the worker woke
    ticks_at_work = sampler.ticks - told["tick"]

    names = session.frame_info
    by_thread: dict[str, Counter] = {}
    per_thread_total: Counter = Counter()
    for (thread, sid, _stop, cls), n in session.samples.items():
        name = session.threads[thread].name
        per_thread_total[thread] += n
        if cls == SampleClass.RUNNING:
            leafward = tuple(names[f].name for f in reversed(session.stacks.frames(sid)))
            by_thread.setdefault(name, Counter())[leafward[:2]] += n
    # The worker ran from the go on: nearly every tick since sampled it at work, though it was dormant. A
    # tick whose stop came after its window has no sample (the stop is the next tick's): with the CPUs taken
    # by other programs, the worker waits for one (163 of 236 ticks beside two CPU hogs), and that is counted
    late_stops = session.counters.get("late_stops", 0)
    at_work = by_thread.get("worker", Counter())[("crunch", "worker_main")]
    assert at_work + late_stops >= 0.7 * ticks_at_work, (at_work, late_stops, ticks_at_work, by_thread.get("worker"))
    # The thread it started was found without a full listing at every look, and sampled from then on
    late = by_thread.get("late", Counter())[("late_spin", "late_main")]
    assert late >= 0.25 * ticks_at_work, (late, ticks_at_work, by_thread.get("late"))  # (~half of them)
    assert session.deferred_samples == 0
    # /proc/PID/task was listed when the thread count changed and once a second, not at every look (10 ms)
    seconds = sampler.session.meta.duration
    assert len(listings) <= seconds + 6, (len(listings), seconds)
    if idle:
        # With --idle every thread alive from the first tick to the last has a sample at every tick: the
        # dormant ones' deferred samples were all added (a sleeper is stopped once, at the first tick), but
        # for a tick whose stop came late (a sleeper woken for its stop waits for a CPU under load)
        sleepers = [t for t, info in enumerate(session.threads) if info.name not in ("worker", "late")]
        totals = {per_thread_total[t] for t in sleepers}
        assert sampler.ticks - late_stops <= min(totals) <= max(totals) <= sampler.ticks, (totals, late_stops)


def test_a_process_let_go_at_an_exec_keeps_its_dormant_threads_samples(dormant_fp, tmp_path):
    """The worker execs a 32-bit program: nprof lets the process go at its exec stop (``processes.py``), and
    the samples its dormant threads deferred until then are still added to the session. Before, the target
    was removed first, and nothing flushed them: with --idle each sleeper had only its samples from before
    it went dormant."""
    quiet = 100
    sampler, session, told, _dormancy = record_through_a_wake(
        dormant_fp, True, quiet, GIVE_UP, write_i386_binary(str(tmp_path / "pause32")))
    assert sampler.end_reason is EndReason.EXITED  # (the only process was let go)
    assert session.deferred_samples == 0
    per_thread: Counter = Counter()
    for (thread, _sid, _stop, _cls), n in session.samples.items():
        per_thread[thread] += n
    sleepers = [t for t, info in enumerate(session.threads) if info.name not in ("worker", "late")]
    assert len(sleepers) >= SLEEPERS
    # dormant from ~1 s in, until the exec: at least the quiet ticks before the go, added at the exec
    assert min(per_thread[t] for t in sleepers) >= sampler._dormant_after + quiet, per_thread
