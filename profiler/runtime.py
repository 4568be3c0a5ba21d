"""The agent protocol: how a managed runtime (CPython, a JIT with perf maps) teaches the engine its frames.

DESIGN.md section 4. The engine never imports a concrete agent; ``cli`` and ``daemon`` pass ``Agent``s in.
An agent is an ``Agent`` (a factory) whose ``detect`` returns an ``AgentSession`` for a process it recognises.
A session must do what ``AgentSession`` declares; each optional capability is a small protocol of its own,
which the engine checks once, when the session is made (``Capabilities.of``), and calls without looking
again. The split that matters for the target: ``capture``/``snapshot`` run while the thread is stopped
and only copy bytes; everything else runs after it has been resumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from profiler.model import FrameInfo, Mechanism, NativeFrame, RuntimeFrame

if TYPE_CHECKING:
    from profiler.target.process import TargetProcess
    from profiler.target.ptrace import user_regs_struct
    from profiler.unwind.stack import StackWindow


class CoRead(Protocol):
    """Ranges an agent wants copied in the same ``process_vm_readv`` as a stopped thread's stack window."""

    def read_with_stack(self, tid: int, dest: int, addr: int, size: int) -> int:
        """Copy the window ``[addr, addr + size)`` to ``dest`` (``size`` is 0 without a native stack) and the
        agent's ranges wherever it keeps them; the window's bytes read, or -errno."""


class StopCopy(Protocol):
    """What an agent hands back from a stop: opaque to the engine, which keeps it with the thread's copy and
    passes it back to the agent after resume (each agent method taking one narrows it to its own type).
    ``co_read``: None, or ranges for the tracer to copy with the stack window (``CoRead``)."""

    @property
    def co_read(self) -> CoRead | None: ...


@runtime_checkable
class AgentSession(Protocol):
    """One agent attached to one process: what every agent must do."""

    #: short name used in frame keys and session files, e.g. "cpython"
    name: str

    def capture(self, tid: int, regs: user_regs_struct) -> StopCopy | None:
        """Copy what decoding needs from the stopped thread ``tid``: syscalls only, no decoding. ``regs`` is
        valid only during this call (CPython before 3.11 reads ``fs_base`` to find the thread's state)."""

    def frames(self, copy: StopCopy) -> list[RuntimeFrame]:
        """Decode a copy into runtime frames, innermost first (after the thread was resumed). ``entry`` marks
        the first frame of each native eval-loop activation (``sampling/merge.py``)."""

    def is_anchor(self, frame: NativeFrame) -> bool:
        """True for the native frames runtime frames attach to (e.g. ``_PyEval_EvalFrameDefault``)."""

    def describe(self, frame: RuntimeFrame) -> FrameInfo:
        """Name, file and line of a runtime frame; called once per unique frame, at export."""


class _Recapture:
    """The type of ``RECAPTURE``: a copy that is not one."""

    co_read: CoRead | None = None


#: What ``Snapshots.settle`` returns for a snapshot that did not hold everything: the engine stops the thread
#: again and calls ``snapshot`` during that stop (the agent may copy more this time, or return None, and the
#: engine calls ``capture`` in the same stop). A second snapshot that falls short is followed by a third
#: stop, which calls ``capture``.
RECAPTURE: StopCopy = _Recapture()


# --- optional capabilities: each checked once per session (``Capabilities.of``) ----------------------------


@runtime_checkable
class Snapshots(Protocol):
    """A cheaper copy in the stop, worked out after resume. ``snapshot`` copies only bytes it can name without
    reading any (what the thread's previous capture needed; its ``co_read`` has the tracer copy them with the
    stack window), or returns None when it cannot help (the engine calls ``capture`` in the same stop).
    ``settle`` turns it into what ``capture`` would have returned, or ``RECAPTURE``; anything that did not
    come from ``snapshot`` it returns unchanged (or ``RECAPTURE`` where a capture fell short)."""

    def snapshot(self, tid: int, regs: user_regs_struct) -> StopCopy | None: ...

    def settle(self, copy: StopCopy) -> StopCopy | None: ...


@runtime_checkable
class Refreshes(Protocol):
    """Work between ticks, never while a thread is stopped (re-reading thread lists...), when the agent sees
    fit, or at once with ``force``: ``nprof dump`` does that with every thread held, then captures each."""

    def refresh(self, force: bool = False) -> None: ...


@runtime_checkable
class RuntimeLock(Protocol):
    """A global runtime lock (CPython's GIL): whether a copy's thread held it, None if unknown; whether a
    native frame is inside the wait for it (``take_gil``)."""

    def holds_gil(self, copy: StopCopy) -> bool | None: ...

    def is_gil_wait(self, frame: NativeFrame) -> bool: ...


@runtime_checkable
class ActivationRecords(Protocol):
    """Where each group of a copy's runtime frames (innermost first, as the merge groups them) keeps the record
    of its native eval-loop activation on the C stack, 0 where unknown; called after ``frames``
    (``sampling/anchoring.py``). ``anchors_complete``: ``is_anchor`` names every part of the eval loop, so a
    placement by address it disagrees with is counted."""

    @property
    def anchors_complete(self) -> bool: ...

    def activations(self, copy: StopCopy, stack: StackWindow) -> Sequence[int]: ...


@runtime_checkable
class InterpreterGlue(Protocol):
    """The runtime's own native frames between its eval loop and a C call, hidden by ``--hide-interpreter``:
    by address, and by name for copies inlined into other functions (DWARF names those)."""

    def is_interpreter_frame(self, frame: NativeFrame) -> bool: ...

    def is_interpreter_function(self, name: str) -> bool: ...


@runtime_checkable
class RuntimeMechanics(Protocol):
    """The runtime's own machinery (``Mechanism``: its lock's hand-off and wait, its garbage collector, its
    imports) that function ``name`` at native ``frame`` is part of: the frame's own function, or a call DWARF
    says is inlined at it. Runtime frames carry theirs in ``describe``. For the summary table."""

    def mechanism(self, frame: NativeFrame, name: str) -> Mechanism | None: ...


@runtime_checkable
class InterpreterCode(Protocol):
    """The runtime's own modules, by path as the maps name them: the code that starts the runtime and runs
    it. Their frames outward of a stack's first runtime frame can only be its start-up (``Py_BytesMain`` ...
    ``PyEval_EvalCode`` before ``<module>``), hidden by ``--hide-interpreter`` (``symbolize/startup.py``)."""

    def is_interpreter_module(self, path: str) -> bool: ...


@runtime_checkable
class CoroutineStacks(Protocol):
    """Functions at the base of a coroutine's own C stack (greenlet's ``g_initialstub``), by name."""

    def is_coroutine_base(self, name: str) -> bool: ...


@runtime_checkable
class ThreadNames(Protocol):
    """The runtime's name for a thread known alive at ``alive_since`` (monotonic): a name given before then
    may be an exited thread's."""

    def thread_name(self, tid: int, fs_base: int, alive_since: float) -> str | None: ...


@runtime_checkable
class Locals(Protocol):
    """Per runtime frame of ``frames(copy)``, (name, value text) pairs; called while the thread is still
    stopped (``nprof dump --locals``)."""

    def locals(self, copy: StopCopy) -> list[list[tuple[str, str]]]: ...


@runtime_checkable
class Reports(Protocol):
    """At the end of a recording: per-sample failures the agent counted, and what the user must be told, one
    line each; ``label``: the runtime as the user is told of it ("CPython 3.12 (libpython3.12.so.1.0)")."""

    @property
    def label(self) -> str: ...

    def counters(self) -> dict[str, int]: ...

    def notices(self) -> list[str]: ...


@dataclass(frozen=True)
class Capabilities:
    """The optional capabilities one agent session has, each None where it has not."""

    snapshots: Snapshots | None = None
    refreshes: Refreshes | None = None
    lock: RuntimeLock | None = None
    records: ActivationRecords | None = None
    glue: InterpreterGlue | None = None
    coroutines: CoroutineStacks | None = None
    names: ThreadNames | None = None
    locals: Locals | None = None
    reports: Reports | None = None

    @classmethod
    def of(cls, session: AgentSession) -> Capabilities:
        """Check ``session`` once for every optional capability."""
        return cls(
            snapshots=session if isinstance(session, Snapshots) else None,
            refreshes=session if isinstance(session, Refreshes) else None,
            lock=session if isinstance(session, RuntimeLock) else None,
            records=session if isinstance(session, ActivationRecords) else None,
            glue=session if isinstance(session, InterpreterGlue) else None,
            coroutines=session if isinstance(session, CoroutineStacks) else None,
            names=session if isinstance(session, ThreadNames) else None,
            locals=session if isinstance(session, Locals) else None,
            reports=session if isinstance(session, Reports) else None,
        )


class Agent(Protocol):
    """A factory that recognises its runtime in a process."""

    name: str
    #: why the last ``detect`` found no runtime, for the notice that the process is profiled natively
    last_reason: str | None

    def detect(self, process: TargetProcess) -> AgentSession | None:
        """Return a session if the runtime is present, None if not. Raise only for setup failures."""
