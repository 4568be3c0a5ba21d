"""The agent protocol: how a managed runtime (CPython, a JIT with perf maps) teaches the engine its frames.

DESIGN.md section 4. The engine never imports a concrete agent; ``cli`` and ``daemon`` pass instances in.
The split matters for the target: ``capture`` runs while the thread is stopped and must only copy bytes;
``frames`` and ``describe`` run after it has been resumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from profiler.model import FrameInfo, NativeFrame, RuntimeFrame

if TYPE_CHECKING:
    from profiler.target.process import TargetProcess


@runtime_checkable
class AgentSession(Protocol):
    """One agent attached to one process."""

    #: short name used in frame keys and session files, e.g. "cpython"
    name: str

    def capture(self, tid: int, regs: object) -> object | None:
        """Copy what decoding needs from the stopped thread ``tid``: syscalls only, no decoding.

        ``regs`` is the thread's ``user_regs_struct`` (python-ptrace), valid only during this call; an agent
        reads the few fields it needs (``fs_base`` maps a thread to a CPython thread state before 3.11).
        """

    def frames(self, capture: object) -> list[RuntimeFrame]:
        """Decode a capture into runtime frames, innermost first (after the thread was resumed)."""

    def is_anchor(self, frame: NativeFrame) -> bool:
        """True for the native frames runtime frames attach to (e.g. ``_PyEval_EvalFrameDefault``)."""

    def describe(self, frame: RuntimeFrame) -> FrameInfo:
        """Name, file and line of a runtime frame; called once per unique frame, at export."""


#: What ``settle`` returns for a snapshot that did not hold everything: the engine stops the thread again
#: and calls ``snapshot`` during that stop (the agent may copy more this time: what the settle found it
#: lacked, where it can name it; or return None, and the engine calls ``capture`` in the same stop). A
#: second snapshot that falls short too is followed by a third stop, which calls ``capture``.
RECAPTURE = object()

#: Optional ``AgentSession`` methods the engine uses when an agent has them:
#:
#: * ``snapshot(tid, regs) -> object | None`` and ``settle(data) -> object``, a pair: during the stop,
#:   ``snapshot`` copies only bytes it can name without reading any (what the thread's previous capture
#:   needed), and after resume ``settle`` works out from them what ``capture`` would have returned: it
#:   returns that, or ``RECAPTURE`` when the walk needed a byte the snapshot did not hold. ``snapshot``
#:   returns None when it cannot help (a thread not seen before): the engine calls ``capture`` in the same
#:   stop then. ``settle`` returns anything that did not come from ``snapshot`` unchanged.
#:   What ``snapshot`` (or ``capture``) returns may have a ``co_read`` that is not None: the tracer then
#:   copies the stack window with ``co_read.read_with_stack(tid, dest, addr, size) -> int`` (the window's
#:   bytes read, or -errno), which copies the agent's ranges in the same ``process_vm_readv``, right after
#:   the hook returned (``size`` is 0 without a native stack).
#: * ``refresh(force=False)``: between ticks, never while a thread is stopped (re-read thread lists...), when
#:   the agent sees fit, or at once with ``force``: ``nprof dump`` does that with every thread held, then
#:   captures each, so that the snapshot holds every thread the runtime knows.
#: * ``holds_gil(capture) -> bool | None``: the thread held the runtime's global lock at the stop.
#: * ``is_gil_wait(frame) -> bool``: a native frame of the runtime's lock wait (CPython's ``take_gil``).
#: * ``is_interpreter_frame(frame) -> bool``: the interpreter's own glue between its eval loop and a C call,
#:   hidden by ``--hide-interpreter``.
#: * ``is_interpreter_function(name) -> bool``: the same, by a function's name, for the copies of that glue
#:   inlined into other functions (DWARF names them; they have no address range of their own).
#: * ``thread_name(tid, fs_base, alive_since) -> str | None``: the runtime's name for a thread, known alive at
#:   ``alive_since`` (monotonic): a name the runtime gave before then may be an exited thread's.
#: * ``locals(capture) -> list[list[tuple[str, str]]]``: per runtime frame, (name, value text) pairs; called
#:   while the thread is still stopped (``nprof dump --locals``).
#: * ``counters() -> dict[str, int]``: per-sample failures the agent counted (truncated chains...), added to
#:   the session's counters at the end of a recording.
#: * ``notices() -> list[str]``: at the end of a recording, what the user must be told about it (the runtime's
#:   frames could not be read at all...), one line each.
#: * ``label``, a property: the runtime as the user is told of it ("CPython 3.12 (libpython3.12.so.1.0)"),
#:   in the notice of a runtime found after the attach; ``name`` where there is none.
OPTIONAL_SESSION_METHODS = (
    "snapshot", "settle", "refresh", "holds_gil", "is_gil_wait", "is_interpreter_frame",
    "is_interpreter_function", "thread_name",
    "locals", "counters", "notices", "label",
)  # fmt: skip


class Agent(Protocol):
    """A factory that recognises its runtime in a process."""

    name: str

    def detect(self, process: TargetProcess) -> AgentSession | None:
        """Return a session if the runtime is present, None if not. Raise only for setup failures."""
