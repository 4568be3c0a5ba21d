"""The sampler's per-tick decisions, as pure logic over stand-ins (the real thing is covered by the
recording tests against live targets): stopping a thread or counting its last stack again
(``IdleCheck.reuse``, over scripted ``/proc`` readings), and settling the agents' snapshots after resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from profiler.config import SamplerConfig
from profiler.model import SampleClass
from profiler.profile.session import Session, SessionMeta
from profiler.runtime import RECAPTURE, Capabilities
from profiler.sampling.idle import IDLE_EPSILON_NS
from profiler.sampling.sampled_process import SampledProcess, SampledThread
from profiler.sampling.sampler import Sampler
from profiler.target.capture import SeizedThread


@dataclass
class ScriptedProc:
    """schedstat and state of one thread, as the test sets them; counts the state reads."""

    run_time: int = 5_000_000
    slices: int = 7
    letter: str = "S"
    state_reads: int = 0

    def schedstat(self) -> tuple[int, int]:
        return self.run_time, self.slices

    def state(self) -> str:
        self.state_reads += 1
        return self.letter


@dataclass
class Record:
    proc: ScriptedProc = field(default_factory=ScriptedProc)


def sampler(**config: object) -> Sampler:
    return Sampler(Session(SessionMeta(pid=1, command=[])), SamplerConfig(**config))


def test_thread_asleep_since_attach_is_left_alone_and_looked_at_once():
    s, record, state = sampler(), Record(), SampledThread(index=0)
    assert all(s.idle.reuse(record, state) for _ in range(50))
    assert record.proc.state_reads == 1  # the first look; then its run time and switch count say "same"
    assert s.session.total_samples == 0  # no stack known, so nothing to count
    assert state.last_class is SampleClass.BLOCKED


def test_thread_asleep_since_attach_is_stopped_once_it_runs():
    s, record, state = sampler(), Record(), SampledThread(index=0)
    s.idle.reuse(record, state)
    record.proc.run_time += 10 * IDLE_EPSILON_NS
    record.proc.slices += 1
    record.proc.letter = "R"
    assert s.idle.reuse(record, state) is False


def test_thread_stopped_since_before_the_attach_is_stopped_once_for_its_stack():
    s, record, state = sampler(), Record(ScriptedProc(letter="t")), SampledThread(index=0)
    assert s.idle.reuse(record, state) is False  # no stack yet: nothing runs that a stop could disturb
    state.last_stack, state.last_class = 3, SampleClass.IDLE  # what recording that stop leaves
    state.last_run_time, state.last_slices = record.proc.run_time, record.proc.slices
    record.proc.run_time += IDLE_EPSILON_NS // 2  # the kernel's work for the stop
    record.proc.slices += 1
    assert all(s.idle.reuse(record, state) for _ in range(10))
    assert s.session.total_samples == 10 and state.last_class is SampleClass.IDLE


def test_sleeping_threads_are_stopped_with_interrupt_sleeping():
    s, record, state = sampler(interrupt_sleeping=True), Record(), SampledThread(index=0)
    assert s.idle.reuse(record, state) is False  # never sampled: its stack is wanted, asleep or not


@dataclass
class SettlingTarget:
    """Stands in for a SampledProcess: only its agent's ``settle``, answering from a script per thread."""

    answers: dict[int, object]

    @property
    def caps(self) -> Capabilities:
        return Capabilities(snapshots=self)  # type: ignore[arg-type]

    def settle(self, data: object) -> object:
        answer = self.answers[data]  # type: ignore[index]
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass
class Thread:
    tid: int
    pid: int = 1


@dataclass
class FakeCapture:
    thread: Thread
    agent_data: object


def test_snapshots_that_fall_short_are_captured_again_not_recorded():
    """After resume each snapshot is settled: a settled one is recorded with what the agent made of it, one
    that fell short (RECAPTURE) is handed back to be captured again, and an agent that fails to settle is
    counted and its sample keeps its native frames."""
    s = sampler()
    agent = SettlingTarget({10: "stack of 10", 11: RECAPTURE, 12: RuntimeError("agent bug")})
    s.targets[1] = agent  # type: ignore[assignment]
    recorded: list[tuple[int, object]] = []
    s.record = lambda c: recorded.append((c.thread.tid, c.agent_data))  # type: ignore[method-assign]
    s.tracer.answer_events = lambda: None  # type: ignore[method-assign]
    captures = [FakeCapture(Thread(tid), tid) for tid in (10, 11, 12, 13)]
    captures[3].agent_data = None  # a native thread: nothing to settle
    again = s._record_all(captures, settle=True)  # type: ignore[arg-type]
    assert [t.tid for t in again] == [11]
    assert recorded == [(10, "stack of 10"), (12, None), (13, None)]
    assert s.session.counters.get("agent_settle_errors") == 1


@dataclass
class ScriptedTracer:
    """Stands in for the tracer: each ``capture`` call is noted (threads, hook) and makes one capture per
    thread, whose agent data is its tid and the round."""

    calls: list[tuple[list[int], object]] = field(default_factory=list)

    def capture(
        self, due: list[Thread], copy_stack: bool, agent_capture: object, window: float | None,
        late_agent_capture: object,
    ) -> list[FakeCapture]:
        self.calls.append(([t.tid for t in due], agent_capture))
        return [FakeCapture(t, (t.tid, len(self.calls))) for t in due]

    def answer_events(self) -> None:
        pass


def test_a_snapshot_that_fell_short_is_snapshotted_again_then_captured_in_full():
    """A thread whose snapshot fell short is stopped again with the agent's snapshot hook (it copies what
    the settle found missing), and that copy is settled too; one that falls short again is stopped a third
    time with the full capture hook, recorded as it comes. No thread is stopped a fourth time."""
    s = sampler()
    s.tracer = ScriptedTracer()  # type: ignore[assignment]
    s.targets[1] = SettlingTarget({  # type: ignore[assignment]
        (11, 1): "11 settled from its second snapshot",
        (12, 1): RECAPTURE,
    })
    recorded: list[object] = []
    s.record = lambda c: recorded.append(c.agent_data)  # type: ignore[method-assign]
    first, full = object(), object()
    stops = s._capture_again([Thread(11), Thread(12)], first, full)  # type: ignore[arg-type]
    assert s.tracer.calls == [([11, 12], first), ([12], full)]
    assert recorded == ["11 settled from its second snapshot", (12, 2)] and stops == 3


def test_a_sleeper_sampled_before_its_runtime_was_found_is_stopped_again_with_idle():
    """A thread that went to sleep before the runtime agent found its interpreter was sampled without any
    runtime frames: with --idle it is stopped again once the agent is there, rather than counted with
    that stack for as long as it sleeps. (The first 46 of 200 threads of a 3.12 program that started them
    at once lacked their Python frames in every sample of a 3 s recording.)"""
    s, proc, state = sampler(interrupt_sleeping=True), ScriptedProc(), SampledThread(index=0)
    state.last_stack, state.last_class = 3, SampleClass.BLOCKED
    state.last_run_time, state.last_slices = proc.run_time, proc.slices  # as of its one stop, native only
    record = SeizedThread(1, 2, 1, "worker", proc=proc, user=state)  # type: ignore[arg-type]
    assert s.idle.reuse(record, state), "asleep since its stop: the same stack, counted again"
    target = SampledProcess(SimpleNamespace(pid=1), SimpleNamespace(), SamplerConfig())  # type: ignore[arg-type]
    target.records = [record]
    runtime = SimpleNamespace(name="cpython", detect=lambda process: SimpleNamespace())
    assert target.detect([runtime], lambda session, pid: 0)  # type: ignore[list-item]
    assert s.idle.reuse(record, state) is False, "stopped for a stack with the runtime's frames"
