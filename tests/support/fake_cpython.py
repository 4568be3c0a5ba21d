"""A fake CPython target for the agent's unit tests: a bytearray laid out with thread states, frames, code
objects and strings for a real version layout, read as the agent reads a process (``FakeTarget.readv``, the
agent's injected memory reader, with the kernel's partial-read rule: a copy stops at the first remote iovec
that is not fully mapped), and the helpers that make chains, captures and sessions over it."""

from __future__ import annotations

import ctypes
import os
import struct
from types import SimpleNamespace

import pytest

from agents.cpython import plan
from agents.cpython.binding import ThreadBindings
from agents.cpython.capture import ChainCopier, StackCapture
from agents.cpython.code import CodeCache
from agents.cpython.frames import decode_frames
from agents.cpython.layout import FrameStruct, Layout, LineTableFormat
from agents.cpython.locals import LocalsReader
from agents.cpython.marks import ActivationMarks
from agents.cpython.offsets import TABLES
from agents.cpython.scatter import PAGE_SIZE, ScatterReader
from agents.cpython.session import CPythonSession, SessionStats
from agents.cpython.slot import ThreadSlot
from agents.cpython.threads import ThreadMap, ThreadStateInfo

HEAP = 0x10_0000_0000
HEAP_SIZE = 4 << 20
CSTACK_SIZE = 64 << 10  #: the top of the fake's memory is a C stack, growing down (3.11/3.12's cframes)
UNMAPPED = 0x20_0000_0000
CODE_TYPE, STR_TYPE, BYTES_TYPE = 0x5000_0000, 0x5000_1000, 0x5000_2000
TYPES = {"PyCode_Type": CODE_TYPE, "PyUnicode_Type": STR_TYPE, "PyBytes_Type": BYTES_TYPE}
TID = 4242
OWNER_CSTACK = 3
OWNER_GENERATOR = 1
#: a line table saying "co_firstlineno + 1" for the first instructions, in each format (linetable.py)
LINE_PLUS_ONE = {
    LineTableFormat.LNOTAB: bytes([0, 1]),  # from byte 0: +1
    LineTableFormat.LINETABLE_310: bytes([200, 1]),  # bytes [0, 200): +1
    LineTableFormat.LOCATIONS: bytes([0x80 | 13 << 3 | 7, 2]),  # 8 code units, no columns, varint +1
}


class FakeTarget:
    """A heap holding the structures of one layout; ``readv`` replaces process_vm_readv."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.heap = bytearray(HEAP_SIZE)
        self.top = HEAP
        self.sp = HEAP + HEAP_SIZE  #: the fake C stack's lowest address in use
        self.syscalls = 0
        self.runtime = 0

    # --- memory ---------------------------------------------------------------------------------------

    def alloc(self, size: int) -> int:
        addr = self.top
        self.top += (size + 15) & ~15
        assert self.top <= HEAP + HEAP_SIZE - CSTACK_SIZE
        return addr

    def push(self, size: int) -> int:
        """Room on the fake C stack, below what is there: where an eval loop entered later keeps its cframe."""
        self.sp -= (size + 15) & ~15
        assert self.sp >= HEAP + HEAP_SIZE - CSTACK_SIZE
        return self.sp

    def put(self, addr: int, fmt: str, *values: object) -> None:
        struct.pack_into("<" + fmt, self.heap, addr - HEAP, *values)

    def read(self, addr: int, size: int) -> bytes:
        if not HEAP <= addr < HEAP + HEAP_SIZE:
            return b""
        start = addr - HEAP
        return bytes(self.heap[start : min(start + size, HEAP_SIZE)])

    def readv(self, pid, local, nlocal, remote, nremote, flags) -> int:
        self.syscalls += 1
        if nremote > plan.IOV_MAX:
            return -1  # EINVAL, as the kernel answers more than UIO_MAXIOV iovecs
        dest = bytearray()
        for base, size in _iovecs(remote, nremote):
            data = self.read(base, size)
            if len(data) != size:
                break
            dest += data
        done, at = len(dest), 0
        for base, size in _iovecs(local, nlocal):  # the bytes read fill the local iovecs in order
            chunk = dest[at : at + size]
            ctypes.memmove(base, bytes(chunk), len(chunk))
            at += len(chunk)
        return done if done or nremote == 1 and not _iovecs(remote, 1)[0][1] else -1

    # --- objects --------------------------------------------------------------------------------------

    def string(self, text: str) -> int:
        o = self.layout.objects
        data = text.encode("ascii")
        addr = self.alloc(o.unicode_ascii_size + len(data) + 1)
        self.put(addr, "qQ", 1, STR_TYPE)
        self.put(addr + o.unicode_length, "q", len(data))
        self.put(addr + o.unicode_state, "I", 1 << 2 | 1 << 5 | 1 << 6)  # kind 1, compact, ascii
        self.heap[addr - HEAP + o.unicode_ascii_size : addr - HEAP + o.unicode_ascii_size + len(data)] = data
        return addr

    def bytes_object(self, data: bytes) -> int:
        addr = self.alloc(32 + len(data))
        self.put(addr, "qQq", 1, BYTES_TYPE, len(data))
        self.heap[addr - HEAP + 32 : addr - HEAP + 32 + len(data)] = data
        return addr

    def code(self, name: str, firstlineno: int, version: int = 0, first_traceable: int = 0) -> int:
        c = self.layout.code
        addr = self.alloc(max(c.size, (c.code_adaptive or 0) + 64))
        self.put(addr, "qQ", 1, CODE_TYPE)
        self.put(addr + c.firstlineno, "i", firstlineno)
        self.put(addr + c.filename, "Q", self.string(f"{name}.py"))
        self.put(addr + c.name, "Q", self.string(name))
        if c.qualname is not None:
            self.put(addr + c.qualname, "Q", self.string(f"Q.{name}"))
        table = LINE_PLUS_ONE[c.linetable_format]
        self.put(addr + c.linetable, "Q", self.bytes_object(table))
        if c.version is not None:
            self.put(addr + c.version, "I", version)
        if c.first_traceable is not None:
            self.put(addr + c.first_traceable, "i", first_traceable)
        return addr

    def frame(self, code: int, previous: int, position: int = 0, owner: int = 0, is_entry: int = 0) -> int:
        f = self.layout.frame
        addr = self.alloc(max(f.size, f.localsplus) + 16)
        self.link(addr, previous)
        self.put(addr + f.code, "Q", code)
        if f.kind is FrameStruct.FRAME_OBJECT:
            self.put(addr + f.instr, "i", position)
        else:
            self.put(addr + f.instr, "Q", code + (self.layout.code.code_adaptive or 0) + 2 * position)
        if f.owner is not None:
            self.put(addr + f.owner, "B", owner)
        if f.is_entry is not None:
            self.put(addr + f.is_entry, "B", is_entry)
        return addr

    def link(self, frame: int, previous: int) -> None:
        self.put(frame + self.layout.frame.previous, "Q", previous)

    def thread_state(self, innermost: int) -> ThreadStateInfo:
        t = self.layout.thread
        addr = self.alloc(t.size)
        ident = t.native_thread_id if t.native_thread_id is not None else t.thread_id
        self.put(addr + ident, "Q", TID)
        if t.cframe_current_frame is not None:
            cframe = self.push(32)  # the outermost eval loop's, enclosed by the thread's root_cframe
            self.put(cframe + t.cframe_current_frame, "Q", innermost)
            self.put(cframe + t.cframe_previous, "Q", addr + t.root_cframe)
            self.put(addr + t.frame, "Q", cframe)
        else:
            self.put(addr + t.frame, "Q", innermost)
        return ThreadStateInfo(addr, 0, TID, TID, 0)


LAYOUTS = [pytest.param(TABLES[v], id=f"{v[0]}.{v[1]}") for v in [(3, 8), (3, 10), (3, 11), (3, 12)]]


def chain(target: FakeTarget, names: list[str]) -> tuple[ThreadStateInfo, list[int]]:
    """Frames running functions ``names`` (innermost first), linked outward; returns the thread state."""
    frames: list[int] = []
    previous = 0
    for i, name in reversed(list(enumerate(names))):
        previous = target.frame(target.code(name, 10 * (i + 1), version=i + 1), previous, position=1)
        frames.insert(0, previous)
    return target.thread_state(frames[0]), frames


def capture(target: FakeTarget, info: ThreadStateInfo, reader: ScatterReader | None = None):
    reader = reader or ScatterReader(1, capacity=4 << 20, readv=target.readv)
    if target.runtime == 0:
        target.runtime = target.alloc(2048)  # _PyRuntime: where <=3.11 keep the GIL holder
    copier = ChainCopier(target.layout, runtime=target.runtime)
    reader.begin(reader.plan)
    return copier.copy(reader, TID, TID, info)


def decode(target: FakeTarget, stack, codes: CodeCache | None = None):
    """What the session does: new code objects decoded at the stop (``decode_new``; a settled snapshot's
    code objects were identified by ``settle``), frames after resume. The fake target does not change
    between the two here, unless a test changes it before calling this."""
    codes = codes or CodeCache(target.read, target.layout.code, target.layout.objects, TYPES)
    if not stack.code_keys:
        codes.decode_new(stack)
    adaptive = target.layout.code.code_adaptive or 0
    return decode_frames(stack, target.layout.frame, adaptive, codes.by_key), codes


def names_of(codes: CodeCache, frames) -> list[str]:
    return [codes.get(f.code).name.removeprefix("Q.") for f in frames if not f.shim]


def session_over(target: FakeTarget, info: ThreadStateInfo) -> CPythonSession:
    """A ``CPythonSession`` over the fake target's memory, with the fields ``capture``, ``snapshot`` and
    ``settle`` use (no process, no interpreter detection)."""
    if target.runtime == 0:
        target.runtime = target.alloc(2048)
    session = object.__new__(CPythonSession)
    session.layout = target.layout
    session.stats = SessionStats()
    session.codes = CodeCache(target.read, target.layout.code, target.layout.objects, TYPES)
    session._copier = ChainCopier(target.layout, runtime=target.runtime)
    session._reader = ScatterReader(1, capacity=4 << 20, readv=target.readv)
    session.process = SimpleNamespace(pid=os.getpid(), read=target.read)  # (in nprof's pid namespace)
    interpreter = SimpleNamespace(layout=target.layout, runtime=target.runtime)
    bindings = session.bindings = ThreadBindings(session.process, interpreter, session._copier.native_keys,
                                                 session.stats, target.readv)  # fmt: skip
    bindings.slots = {TID: ThreadSlot(TID, info, readv=target.readv)}
    bindings.threads = ThreadMap({}, [], [], True)  # no walk: no search for a thread's state in its stop
    bindings.main_tid, session._main_mapped = TID, False
    session._code_adaptive = target.layout.code.code_adaptive or 0
    session._locals = LocalsReader(target.read, target.layout, TYPES)
    session._marks = ActivationMarks(target.layout)

    def snapshot_in_stop(tid: int, regs: object) -> ThreadSlot | None:
        """``snapshot``, then the copy the tracer makes with the stack window (none here: no native stack)."""
        data = CPythonSession.snapshot(session, tid, regs)
        if data is not None:
            data.co_read.read_with_stack(1, 0, 0, 0)
        return data

    session.snapshot = snapshot_in_stop  # type: ignore[method-assign]
    return session


REGS = SimpleNamespace(fs_base=TID)  #: the registers' only field the session reads (<=3.10 map by fs_base)


def planned_chain(target: FakeTarget) -> tuple[CPythonSession, list[int]]:
    """A session over the chain c -> b -> a (innermost first), planned; the target's next objects are made
    away from every planned range, so that a snapshot copies none of them by chance."""
    info, frames = chain(target, ["c", "b", "a"])
    session = session_over(target, info)
    planned(session, target)
    target.top = (target.top | (PAGE_SIZE - 1)) + 1 + PAGE_SIZE
    return session, frames


def planned(session: CPythonSession, target: FakeTarget) -> StackCapture:
    """A first capture in a stop (it has no plan to snapshot by), then the plan built after resume."""
    assert session.snapshot(TID, REGS) is None  # no plan yet: the sampler captures in the stop instead
    first = session.capture(TID, REGS)
    session.bindings.slots[TID].rebuild()  # as ``refresh`` does between ticks
    return first


def _iovecs(arg: object, count: int) -> list[tuple[int, int]]:
    """(base, length) of the ``count`` iovecs a process_vm_readv argument holds: the agent passes arrays of
    u64 pairs."""
    return [(arg[2 * i], arg[2 * i + 1]) for i in range(count)]  # type: ignore[index]
