"""One sampled process: its address space and unwinder, its managed runtime (if an agent recognises one),
and the per-thread memory the sampler keeps between ticks."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profiler.config import SamplerConfig
from profiler.model import NativeFrame, SampleClass, StopReason
from profiler.profile.memo import FrameMemo
from profiler.runtime import Agent, AgentSession, Capabilities
from profiler.sampling.dormancy import Dormancy
from profiler.target.capture import SeizedThread
from profiler.target.process import TargetProcess
from profiler.unwind.address_space import AddressSpace
from profiler.unwind.policy import NativeUnwinder

#: how long a just-started process is given to load its runtime (libpython is mapped after exec)
DETECT_GRACE = 5.0
#: for this long after a fresh process's first look, its runtime is looked for at every housekeeping pass
#: (``sampler.SYNC_INTERVAL``), not only at every scan for children (``children.SCAN_INTERVAL``): the
#: dynamic loader maps libpython within milliseconds of the exec and the interpreter runs Python code
#: (site, then the script) soon after, so a scan's 100 ms left the first 80 ms of a script's Python code
#: without Python frames in about half of the runs of a 3.12 script (15-17 samples at 200 Hz)
DETECT_SOON = 0.5
#: frames the stack memo of a process holds before it starts over (``memo.py``). An entry keeps its
#: stack's frames alive, ~80-150 bytes a frame: 3.3 KB on average for the mixed Python and native stacks
#: (~40 frames) of a program calling json, re, sqlite3 and xml in a loop, which made 6,088 entries in 10 s
#: at 1 kHz, but 8 KB for the deeper ones of a random call graph. Bounded by entries (2**14), that memo
#: held ~130 MB; bounded by frames, 20-40 MB. A program with more hot stacks than that gets fewer memo
#: hits, each miss costing a merge and an intern.
MAX_MEMO_FRAMES = 1 << 18


@dataclass
class SampledThread:
    """The sampler's memory of one thread between ticks."""

    index: int  #: the session's thread index
    #: monotonic time by which the thread was alive: its first tick (a runtime's names of threads read before
    #: it may be of an exited thread whose identity it took over, ``thread_naming.py``)
    seen: float = 0.0
    fs_base: int = 0  #: the thread pointer: how a runtime before CPython 3.11 knows its threads
    last_run_time: int = -1  #: schedstat run time (ns) as of the thread's last sample
    last_slices: int = -1  #: schedstat timeslices (switches onto a CPU) as of the last sample
    #: consecutive idle checks that found it asleep and not run since its last one (``dormancy.py``)
    asleep_checks: int = 0
    run_time_at_stop: int = -1  #: both, as read just before the stop now in progress
    slices_at_stop: int = -1
    last_stack: int | None = None
    last_stop: StopReason = StopReason.REUSED
    last_class: SampleClass = SampleClass.RUNNING
    runtime_named: bool = False  #: the runtime has named the thread (``thread_naming.py``)
    name_looks: int = 0  #: times the runtime was asked for its name without an answer
    #: samples in a row that ran the runtime's eval loop without its frames (``StackRecorder.record``)
    runtime_missed: int = 0

    def sampled(self) -> None:
        """The stop in progress yielded a sample: later idle checks compare against the schedstat read
        before it."""
        self.last_run_time = self.run_time_at_stop
        self.last_slices = self.slices_at_stop

    def exec_resumed(self, sched: tuple[int, int] | None) -> None:
        """The thread was just let go from its exec stop, at the new program's first instruction: its next
        idle check must not take the exec's own run time for running, which stopped it at once, before it
        had run, and counted a sample at ld.so's entry point per exec (13% of the samples of a program
        that exec'd itself every 3 ms, 29% with --subprocesses: a sweep). It counts as not having run until
        it has, with no stack: the old program's means nothing now."""
        if sched is not None:
            self.last_run_time, self.last_slices = sched
        self.last_stack = None
        self.last_class = SampleClass.RUNNING

    def look_again(self) -> None:
        """The thread's last sample may not show what a stop would now: a runtime was found in its process
        since, and the sample has none of its frames. Its next idle check takes it as having run, so a
        sleeping thread is stopped again where sleepers are (``--idle``) instead of counted with that stack
        for as long as it sleeps (``idle.py``)."""
        self.last_run_time = -1


class SampledProcess:
    """One sampled process and its per-process machinery."""

    def __init__(self, process: TargetProcess, space: AddressSpace, config: SamplerConfig) -> None:
        self.process = process
        self.space = space
        self.unwinder = NativeUnwinder(space, config.max_frames)
        self.agent: AgentSession | None = None
        self.agent_index = -1
        #: the agent session's optional capabilities, checked once when it was found (``runtime.py``)
        self.caps = Capabilities()
        self.records: list[SeizedThread] | None = None  #: live threads as of the last discovery
        #: sleeping threads vouched for by the process's CPU clock (made by the sampler for a process with
        #: ``dormancy.MIN_THREADS`` threads or more)
        self.dormancy: Dormancy | None = None
        self.detect_until = 0.0  #: retry runtime detection until this monotonic time (a fresh process)
        self.detect_reasons: list[str] = []  #: why the agents found no runtime, for the notice
        #: the code mapped (``AddressSpace.generation``, and the files mapped executable) as of the last look
        #: that found no runtime: a look again is worth it only once they change (``loaded_since``)
        self._looked_at: tuple[int, frozenset[str]] = (-1, frozenset())
        #: (native frames, runtime frames, stop, placement by address) -> (stack id, in the runtime's lock
        #: wait, the counters each of its samples adds to, runs the runtime's eval loop)
        self.stack_memo: FrameMemo[tuple[int, bool, tuple[str, ...], bool]] = FrameMemo(MAX_MEMO_FRAMES)
        self._flags: dict[tuple[int, int], tuple[bool, bool]] = {}
        self._bases: dict[tuple[int, int], bool] = {}

    def detect(
        self, agents: Sequence[Agent], register: Callable[[AgentSession, int], int], fresh: bool = False
    ) -> bool:
        """Look for a managed runtime. False if none (yet): ``fresh`` processes get a grace period in which
        ``detection_pending`` asks for another look. ``register`` gives the agent session found its index
        among the recording's agent sessions (one per process and program: the runtime frames it keys
        name code of this process only)."""
        reasons = []
        for agent in agents:
            session = agent.detect(self.process)
            if session is not None:
                self.agent = session
                self.agent_index = register(session, self.process.pid)
                self.caps = Capabilities.of(session)
                self.detect_until = 0.0
                # what was asked of native frames before there was an agent to answer: "not an anchor" for
                # every eval loop sampled while a spawned interpreter started, kept for the rest of the
                # recording, put each later sample's Python frames above its native leaf (docs/decisions/
                # python-anchoring.md)
                self._flags.clear()
                self._bases.clear()
                if self.dormancy is not None:
                    self.dormancy.wake_all()  # (their deferred samples are counted with their old stacks)
                for record in self.records or ():  # sampled before the runtime was found: no frames of it
                    if record.user is not None:
                        record.user.look_again()
                return True
            reasons.append(agent.last_reason or f"no {agent.name} runtime found")
        self.detect_reasons = reasons
        self._looked_at = (self.space.generation, self._code_files())
        if fresh and reasons:
            self.detect_until = time.monotonic() + DETECT_GRACE
        return False

    def loaded_since(self) -> bool:
        """Whether a process with no runtime found has mapped a new file of code since its last look: a
        runtime loaded after the attach (an embedding host that dlopens libpython on first use, like
        PostgreSQL's plpython3u or uWSGI's python plugin; a Python attached before its loader mapped
        libpython). Asked between ticks; the maps are read again by ``AddressSpace.recheck``, not here."""
        if self.agent is not None or self.space.generation == self._looked_at[0]:
            return False
        files = self._code_files()
        new = not files <= self._looked_at[1]
        self._looked_at = (self.space.generation, files | self._looked_at[1])
        return new

    def _code_files(self) -> frozenset[str]:
        return frozenset(m.path for m in self.process.maps.mappings if m.file_backed and m.executable)

    @property
    def detection_pending(self) -> bool:
        return self.agent is None and self.detect_until > 0

    def detection_soon(self, now: float) -> bool:
        """Detection is pending and the process started less than ``DETECT_SOON`` ago."""
        return self.detection_pending and now < self.detect_until - DETECT_GRACE + DETECT_SOON

    def no_runtime_notice(self, native: bool = True) -> str:
        """Why no runtime's frames are read in this process, and what is recorded instead: its native
        frames, or with ``--no-native`` nothing (its samples have no frames to show)."""
        p = self.process
        what = "profiling native frames" if native else (
            "--no-native records no frames of it: leave --no-native out to profile its native frames")
        return f"pid {p.pid} ({p.comm}): {'; '.join(self.detect_reasons)}; {what}"

    def is_coroutine_base(self, frame: NativeFrame) -> bool:
        """Whether a native frame is a coroutine's stack base (the agent's ``is_coroutine_base``, by the name
        of its function), asked once per distinct frame; only of frames between two eval loops of a stack
        with more of them than its runtime frames fill (``merge.py``)."""
        key = (frame.module, frame.rel)
        hit = self._bases.get(key)
        if hit is None:
            coroutines = self.caps.coroutines
            obj = self.space.objects.get(frame.module) if coroutines is not None else None
            symbols = obj.symbols if obj is not None else None
            found = symbols.lookup(frame.rel) if symbols is not None else None
            hit = self._bases[key] = (found is not None and coroutines is not None
                                      and coroutines.is_coroutine_base(found[0]))  # fmt: skip
        return hit

    def flags(self, frame: NativeFrame) -> tuple[bool, bool]:
        """(is an eval-loop anchor, is in the runtime's lock wait) for a native frame, asked of the agent
        once per distinct frame."""
        key = (frame.module, frame.rel)
        hit = self._flags.get(key)
        if hit is None:
            agent, lock = self.agent, self.caps.lock
            hit = self._flags[key] = (
                agent is not None and agent.is_anchor(frame),
                lock is not None and lock.is_gil_wait(frame),
            )
        return hit
