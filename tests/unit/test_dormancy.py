"""``dormancy.py``'s bookkeeping over scripted run times: which threads a tick reads, and when the process's
clock wakes the dormant ones. The kernel's side (the clock is the sum of the threads' accounted run times
plus exited ones') is played by ``World``; tests/integration/test_dormancy.py runs it against the real one."""

from __future__ import annotations

import pytest

from profiler.model import SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.sampling import dormancy as dormancy_module
from profiler.sampling.dormancy import Dormancy
from profiler.sampling.sampled_process import SampledThread
from profiler.target.capture import SeizedThread

AFTER = 3  #: asleep checks that make a thread dormant


class FakeProc:
    """A thread's schedstat as ``ThreadProc`` gives it, counting reads."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.run_time = 0
        self.reads = 0
        self.last_schedstat: tuple[int, int] | None = None

    def schedstat(self) -> tuple[int, int] | None:
        self.reads += 1
        self.last_schedstat = None if self.world.gone(self) else (self.run_time, 0)
        return self.last_schedstat


class World:
    """One process: its threads' run times, and the time of threads that exited, which its clock counts."""

    def __init__(self) -> None:
        self.records: list[SeizedThread] = []
        self.exited_time = 0
        self.exited: set[int] = set()

    def gone(self, proc: FakeProc) -> bool:
        return id(proc) in self.exited

    def clock(self, _clock_id: int) -> int:
        live = sum(r.proc.run_time for r in self.records if id(r.proc) not in self.exited)
        return live + self.exited_time

    def thread(self, tid: int, stacked: bool = True) -> SeizedThread:
        record = SeizedThread(1, tid, 0, f"t{tid}", FakeProc(self))  # type: ignore[arg-type]
        record.user = SampledThread(index=tid, last_stack=7 if stacked else None, last_class=SampleClass.IDLE)
        self.records.append(record)
        return record

    def exit(self, record: SeizedThread) -> None:
        self.exited_time += record.proc.run_time
        self.exited.add(id(record.proc))


def check(record: SeizedThread, state: SampledThread) -> bool:
    """``IdleCheck.reuse`` reduced to what dormancy relies on: one schedstat read, and the asleep count."""
    sched = record.proc.schedstat()
    if sched is None:
        return True
    if sched[0] == state.last_run_time:
        state.asleep_checks += 1
        return True
    state.asleep_checks = 0
    state.last_run_time = sched[0]
    return False


@pytest.fixture
def world(monkeypatch) -> World:
    w = World()
    monkeypatch.setattr(dormancy_module, "read_clock", w.clock)
    return w


def tick(d: Dormancy, world: World) -> list[SeizedThread]:
    due: list[SeizedThread] = []
    d.decide(world.records, check, lambda r: r.user, due)
    return due


def reads(world: World) -> dict[int, int]:
    return {r.tid: r.proc.reads for r in world.records}


def settled(world: World) -> tuple[Dormancy, Session, SeizedThread, list[SeizedThread]]:
    """A busy thread and three sleepers, ticked until the sleepers are dormant."""
    session = Session(SessionMeta(pid=1, command=[]))
    d = Dormancy(1, session, AFTER)
    busy = world.thread(1)
    sleepers = [world.thread(tid) for tid in (2, 3, 4)]
    for _ in range(AFTER + 2):
        busy.proc.run_time += 1000
        tick(d, world)
    assert set(d.dormant) == set(sleepers)
    return d, session, busy, sleepers


def test_a_quiet_tick_reads_only_the_watched_threads_and_defers_the_dormant_ones_samples(world):
    d, session, busy, _sleepers = settled(world)
    before, quiet, deferred = reads(world), d.quiet_ticks, session.deferred_samples
    for _ in range(5):
        busy.proc.run_time += 1000  # the busy thread's own run explains the clock's growth
        assert tick(d, world) == [busy]
    after = reads(world)
    assert after[1] == before[1] + 5 and all(after[t] == before[t] for t in (2, 3, 4))
    assert d.quiet_ticks == quiet + 5 and session.deferred_samples == deferred + 15
    counted = sum(session.samples.values())
    d.flush()
    assert session.deferred_samples == 0
    assert sum(session.samples.values()) == counted + deferred + 15  # 3 sleepers x their quiet ticks


def test_a_dormant_thread_that_ran_wakes_them_all_and_is_watched_again(world):
    d, session, busy, sleepers = settled(world)
    tick(d, world)
    sleepers[1].proc.run_time += 50  # it ran, slept again
    due = tick(d, world)
    assert sleepers[1] in due and sleepers[1] in d.watched
    assert set(d.dormant) == {sleepers[0], sleepers[2]}
    assert d.wakes == 1
    d.flush()
    assert session.deferred_samples == 0


def test_a_watched_threads_run_accounted_after_its_reading_does_not_wake_the_dormant(world, monkeypatch):
    d, _session, busy, _sleepers = settled(world)
    clock = world.clock

    def late_tick(clock_id: int) -> int:  # a scheduler tick lands between the busy thread's read and the clock's
        if late_tick.once:
            late_tick.once = False
            busy.proc.run_time += 4000
        return clock(clock_id)

    late_tick.once = False
    monkeypatch.setattr(dormancy_module, "read_clock", late_tick)
    late_tick.once = True
    tick(d, world)  # the first read (P_a) moves it; the watched thread is read after it: vouched
    late_tick.once = False
    busy.proc.run_time += 1000
    original = busy.proc.schedstat

    armed = [True]

    def then_tick() -> tuple[int, int] | None:
        value = original()
        if armed.pop() if armed else False:
            late_tick.once = True  # the next clock read sees 4 ms this reading did not
        return value

    busy.proc.schedstat = then_tick  # type: ignore[method-assign]
    tick(d, world)
    assert d.wakes == 0  # the watched thread read again explains it


def test_a_new_thread_makes_the_next_tick_read_everything(world):
    d, _session, busy, sleepers = settled(world)
    before = reads(world)
    newcomer = world.thread(9)
    newcomer.proc.run_time = 5000  # it ran before nprof first read it: a lower Q than the bound assumed
    world.records = list(world.records)  # a new list, as a sync makes
    tick(d, world)
    after = reads(world)
    assert all(after[s.tid] == before[s.tid] + 1 for s in sleepers)


def test_an_exited_dormant_thread_leaves_with_its_deferred_samples(world):
    d, session, _busy, sleepers = settled(world)
    tick(d, world)
    tick(d, world)
    quiet = d.quiet_ticks  # every quiet tick since it became dormant (at 0)
    sleepers[0].proc.run_time += 10  # its exit takes a little CPU, then its time counts as exited
    world.exit(sleepers[0])
    tick(d, world)
    assert sleepers[0] not in d.dormant and sleepers[0] not in d.watched
    d.flush()
    assert session.deferred_samples == 0
    assert session.samples[(2, 7, int(StopReason.REUSED), int(SampleClass.IDLE))] == quiet
