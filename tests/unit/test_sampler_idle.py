"""The sampler's per-tick decisions, as pure logic over stand-ins (the real thing is covered by the
recording tests against live targets): stopping a thread or counting its last stack again
(``Sampler._reuse``, over scripted ``/proc`` readings), and warming the agents before the stops."""

from __future__ import annotations

from dataclasses import dataclass, field

from profiler.config import SamplerConfig
from profiler.model import SampleClass
from profiler.sampling.sampler import IDLE_EPSILON_NS, Sampler
from profiler.sampling.session import Session, SessionMeta
from profiler.sampling.target import ThreadState


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
    s, record, state = sampler(), Record(), ThreadState(index=0)
    assert all(s._reuse(record, state) for _ in range(50))
    assert record.proc.state_reads == 1  # the first look; then its run time and switch count say "same"
    assert s.session.total_samples == 0  # no stack known, so nothing to count
    assert state.last_class is SampleClass.BLOCKED


def test_thread_asleep_since_attach_is_stopped_once_it_runs():
    s, record, state = sampler(), Record(), ThreadState(index=0)
    s._reuse(record, state)
    record.proc.run_time += 10 * IDLE_EPSILON_NS
    record.proc.slices += 1
    record.proc.letter = "R"
    assert s._reuse(record, state) is False


def test_sleeping_threads_are_stopped_with_interrupt_sleeping():
    s, record, state = sampler(interrupt_sleeping=True), Record(), ThreadState(index=0)
    assert s._reuse(record, state) is False  # never sampled: its stack is wanted, asleep or not


@dataclass
class WarmTarget:
    """Stands in for a Target: only its agent's warm-up hook."""

    calls: int = 0
    fails: bool = False

    def warm(self) -> None:
        self.calls += 1
        if self.fails:
            raise RuntimeError("an agent bug")


def test_agents_are_warmed_only_when_the_sampler_keeps_its_rate():
    s = sampler()
    ok, broken = WarmTarget(), WarmTarget(fails=True)
    s.targets = {1: ok, 2: broken}  # type: ignore[dict-item]
    s._warm_agents()
    s.timer.behind = True  # the next tick was already due when this one ended
    s._warm_agents()
    assert (ok.calls, broken.calls) == (1, 1)
    assert s.session.counters.get("agent_warm_errors") == 1  # counted; the other agent still warmed
