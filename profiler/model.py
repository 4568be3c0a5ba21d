"""Value types shared by every room of the engine.

Address vocabulary (the same as framehop/samply use):

* **avma** -- *actual* virtual memory address: where a byte lives in the target process right now.
* **svma** -- *stated* virtual memory address: the address the ELF file's own headers, symbol tables and
  CFI use. ``avma = svma + load bias``.
* **rel** -- the address a module's tables are keyed by. For ELF modules this is the svma; for modules
  without a file (anonymous or JIT code) it is the offset from the start of the mapping.

A sample stores ``(module id, rel)`` pairs, never names: names are resolved once per unique address at the
end (DESIGN.md section 2, rule 2).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

# --- x86-64 registers, numbered as the DWARF x86-64 psABI does (System V AMD64 ABI, table 3.36) ---------
# CFI rules name registers by these numbers, so the unwinders keep register sets as lists indexed by them.
DW_RAX, DW_RDX, DW_RCX, DW_RBX, DW_RSI, DW_RDI, DW_RBP, DW_RSP = range(8)
DW_R8, DW_R9, DW_R10, DW_R11, DW_R12, DW_R13, DW_R14, DW_R15 = range(8, 16)
DW_RA = 16  # the "return address" column; holds rip in a register set
NUM_DWARF_REGS = 17
DWARF_REG_NAMES = (
    "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
    "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip",
)  # fmt: skip


class StopReason(enum.IntEnum):
    """Why a native stack walk ended. Stored per sample, so a profile shows how complete its stacks are."""

    END_OF_STACK = 0  #: reached the outermost frame (return address undefined or zero, or rbp chain ended)
    NO_UNWIND_INFO = 1  #: the module holding pc has neither CFI nor a usable frame pointer
    WINDOW_EXHAUSTED = 2  #: the next frame lies above the copied stack window (raise --stack-bytes)
    PC_OUTSIDE_MODULE = 3  #: pc is not inside any executable mapping
    NO_PROGRESS = 4  #: the stack pointer did not increase, so walking on could loop forever
    DEPTH_LIMIT = 5  #: max_frames frames were produced
    BAD_FRAME = 6  #: a saved frame pointer or return address failed validation (alignment, range)
    NO_STACK_COPY = 7  #: the stack could not be copied (thread gone, unreadable, or --no-native)
    REUSED = 8  #: the stack is a reused copy of an idle thread's previous sample
    #: past a signal frame, the interrupted code's stack is not the one copied: a handler running on an
    #: alternate signal stack (sigaltstack(2)) interrupted code whose frames are on the thread's own stack
    OTHER_STACK = 9

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


class UnwindMethod(enum.IntEnum):
    """How a frame was produced; kept per frame so suspicious stacks can be explained."""

    IP = 0  #: the innermost frame, from the instruction pointer
    FRAME_POINTER = 1  #: from the rbp chain
    PROLOGUE = 2  #: return address found by analysing the function's code (no rbp frame there, no CFI)
    CFI = 3  #: from DWARF call frame information
    SCAN = 4  #: from a disassembler-validated stack scan
    SIGNAL = 5  #: the interrupted pc restored from a signal frame


class SampleClass(enum.IntEnum):
    """What the thread was doing when sampled. Idle classes are hidden unless ``--idle`` is given."""

    RUNNING = 0  #: on CPU or runnable
    IDLE = 1  #: had not run since its previous sample; that sample's stack was reused without stopping it
    BLOCKED = 2  #: sleeping in the kernel (blocking syscall) at the time of the sample
    #: waiting for a managed runtime's global lock (inside ``take_gil``): not running, so an idle class, as
    #: py-spy counts it too. Were it shown by default, it would be shown only when the thread was caught
    #: awake in its wait: a waiter asleep since it last ran is counted BLOCKED without a stop (``idle.py``)
    GIL_WAIT = 3
    GIL_HELD = 4  #: running and holding a managed runtime's global lock (what ``--gil`` keeps)

    @property
    def is_idle(self) -> bool:
        return self in IDLE_CLASSES


#: the classes of a sample whose thread was not running (``is_idle``; the sampler tests membership directly,
#: per thread and tick, to spare the property's call)
IDLE_CLASSES = (SampleClass.IDLE, SampleClass.BLOCKED, SampleClass.GIL_WAIT)


class FrameKind(enum.IntEnum):
    """The kinds of frame a stack can hold; the frame table keys on (kind, module, address)."""

    NATIVE = 0  #: (module id, rel address)
    RUNTIME = 1  #: a managed frame from an agent: (agent id, code key, instruction offset)
    SYNTHETIC = 2  #: a label made by nprof itself: (0, a ``SyntheticFrame``), named by ``SYNTHETIC_LABELS``


class SyntheticFrame(enum.IntEnum):
    """What a SYNTHETIC frame stands for (its address field)."""

    #: ``--no-native``: a thread sampled while it ran no managed code (an OpenMP worker of PyTorch, a C
    #: library's own thread). Its stack was empty, and its samples were left out of every output while
    #: the summary counted them (426 samples of 3 threads, 209 shown: a sweep).
    NATIVE_ONLY = 1
    #: between Python frames placed below a native walk that ended early (its stack window ran out) and
    #: that walk's outermost frame: without it, ``inv (_linalg.py)`` read as calling OpenBLAS's
    #: ``dgetrf_parallel`` itself, its callers in between not unwound (numpy on 3.11, a sweep)
    NATIVE_CUT = 2
    #: between the native frames and runtime frames that could not be placed among them (no eval-loop
    #: activation found for them by address or by name): the runtime frames sit above the native leaf,
    #: where they did not run, and this says so instead of presenting the stack as a real one
    UNANCHORED = 3


SYNTHETIC_LABELS = {
    SyntheticFrame.NATIVE_ONLY: "[native code, no Python frame: --native shows it]",
    SyntheticFrame.NATIVE_CUT: "[native frames not unwound]",
    SyntheticFrame.UNANCHORED: "[unanchored]",  # the end of a recording says what it means (notices.py)
}


class NativeFrame(NamedTuple):
    """One native frame.

    ``rel`` is the module-relative address symbolization should use: the pc for the innermost frame (and
    for a frame interrupted by a signal), and ``return address - 1`` for callers, so that a call that is
    the last instruction of a function is attributed to that function and not to the next one.
    ``module`` is -1 when the address is outside every known module; ``rel`` is then the avma.
    """

    module: int
    rel: int
    avma: int
    method: UnwindMethod


class RuntimeFrame(NamedTuple):
    """One managed-runtime frame as an agent decodes it, innermost first.

    ``code`` identifies the code object (e.g. a CPython code object's address, validated by the agent),
    ``offset`` the instruction within it. ``entry`` marks the first frame of a native eval-loop
    activation, where the merge attaches a group of runtime frames to an anchor native frame. ``rest``
    marks an outermost frame that stands for frames the agent did not read, run by any number of the
    outer eval-loop activations (``merge.py``).
    """

    code: int
    offset: int
    entry: bool
    shim: bool = False
    rest: bool = False


@dataclass(frozen=True)
class Module:
    """A mapped object file (or file-less code region) in the target, as the sample tables refer to it."""

    id: int
    path: str  #: path as the target sees it (its mount namespace); "[vdso]", "[anon:...]" for file-less
    build_id: str | None
    start: int  #: lowest avma of the module's mappings
    end: int
    bias: int  #: avma - svma
    file_backed: bool = True


@dataclass
class UnwoundStack:
    """Native frames innermost first, and why the walk ended."""

    frames: list[NativeFrame]
    stop: StopReason
    #: with OTHER_STACK: the stack pointer of the interrupted code, on the stack that was not copied
    other_sp: int = 0
    #: ``sps[i]``: the stack pointer of ``frames[i]`` (rsp while it ran; for a caller, the CFA of the frame it
    #: called), so frame ``i`` owns the stack bytes ``[sps[i], sps[i + 1])``. It may hold one more entry than
    #: ``frames`` (the iteration that ended the walk). Where a runtime keeps a record on the C stack of each
    #: of its eval-loop activations, this says which native frame holds it (``sampling/anchoring.py``)
    sps: list[int] = field(default_factory=list)


class Mechanism(enum.Enum):
    """A piece of a managed runtime's own machinery that a frame is part of, which the summary table names
    as one line instead of leaving its time to the C functions it ends in (``tree/mechanics.py``,
    docs/decisions/summary-mechanics.md). The value is the line's name; the runtime's agent marks the frames."""

    GIL_HANDOFF = "GIL hand-off"  #: releasing the lock to another thread (CPython's drop_gil and its wake-ups)
    GIL_WAIT = "waiting for the GIL"  #: in the wait to take the lock (take_gil)
    GC = "garbage collection"  #: the cyclic garbage collector's passes
    IMPORT = "import"  #: the import machinery (importlib, PyImport_*)


@dataclass(frozen=True)
class FrameInfo:
    """What a frame is called, resolved once per unique frame at the end of a recording."""

    name: str
    file: str | None = None
    line: int | None = None
    module: str | None = None  #: short module name, e.g. "libc.so.6" or "python3.12"
    inlined: bool = False  #: an inlined function expanded from its caller's address
    interpreter: bool = False  #: a runtime's own glue between its eval loop and C calls (--hide-interpreter)
    #: where the function itself is, whichever line was sampled: the file and line it is declared at (DWARF's
    #: DW_AT_decl_file and DW_AT_decl_line; a Python code object's co_filename and co_firstlineno). A frame's
    #: identity in outputs is its function: these stand for it where ``file`` and ``line`` are the sample's
    function_file: str | None = None
    function_line: int | None = None
    #: the root of the source tree ``file`` and ``function_file`` were compiled in, which outputs show paths
    #: under relative to (``tree/source_paths.py``); None where no build root is known
    source_root: str | None = None
    #: code that can only be starting the process or thread where it is outward of a stack's first runtime
    #: frame: the runtime's own (its interpreter's module), the C library's, the program's entry point
    #: (``symbolize/startup.py``). Hidden there by --hide-interpreter (``tree/display.py``)
    startup: bool = False
    mechanism: Mechanism | None = None  #: the runtime's machinery the function is part of (the summary's lines)
