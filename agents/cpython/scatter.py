"""Copying a thread's frame chain during a stop in as few ``process_vm_readv`` calls as possible.

A frame chain is a linked list: each frame's address is known only after its newer neighbour was read, so a
naive walk costs one syscall per frame. Here ``process_vm_readv`` costs ~4-5 us per call whatever its size,
and ~0.6 us per extra remote iovec (measured on this machine kind: 8 bytes or 4 KiB alike), so a 10-frame
stack would keep the thread stopped ~50 us for its reads alone.

But a thread's chain changes little between two samples. So each thread keeps a ``ReadPlan`` (``plan.py``):
the ranges its previous capture needed. One scatter read fetches them all at the start of the next capture
(into the thread's ``Snapshot``, kept in its ``slot.ThreadSlot``); the walk then takes each frame from that copy if
its address was in the plan and reads only the addresses that are new. The copy is exact, not a guess: every
byte was read during *this* stop, so whatever lives at a planned address now is what the walk sees. A stale
plan only costs the extra reads, and a planned address that became unmapped just ends the scatter read early
(the kernel stops at the first faulting remote iovec); the walk then reads the rest one by one.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import struct
from collections.abc import Callable

from agents.cpython.plan import EMPTY_PLAN, IOV_MAX, FixedRanges, ReadPlan

# python-ptrace has no process_vm_readv; profiler.target.ptrace binds it through ctypes, without argtypes
# (iovec arrays go as their address, counts as C ints). Its binding is reused here rather than declared a
# second time. Every iovec here is a pair of u64s (iov_base, iov_len): the kernel's struct iovec on x86-64.
from profiler.target.ptrace import raw_process_vm_readv as process_vm_readv

#: how the agent reads the target's memory: ``process_vm_readv(pid, local iovecs, count, remote iovecs, count,
#: flags)`` with u64-pair iovec arrays, returning the bytes read or -1. Every reader and snapshot takes one,
#: so that tests give it a fake target's memory (tests/support/fake_cpython.py)
Readv = Callable[..., int]

_U64 = struct.Struct("<Q")

#: the copy area of one capture: plan ranges first (at most ``plan.MAX_PLAN_BYTES``, 2 MiB: MAX_FRAMES
#: frame objects of 3.8-3.10, ~450 bytes apart), then the addresses read one by one. Anonymous memory,
#: so only the pages a capture has used count against nprof's memory (typically tens of KiB)
BUFFER_BYTES = 4 << 20
_NO_WINDOW = (0, 0, 0)

#: the kernel maps memory in pages: a range that ends inside a page can grow to that page's end and still
#: touch only pages it already touched, so the longer read cannot fault where the shorter one did not. The
#: target runs on this machine's kernel, so its page size is ours.
PAGE_SIZE = mmap.PAGESIZE


class Snapshot:
    """The bytes of one thread's read plan, copied during its stop and kept for the walk after resume
    (``ScatterReader.replay``): the least an agent can do while the thread is stopped.

    The copy is made by the tracer, in the same ``process_vm_readv`` as the thread's stack window
    (``read_with_stack``: the engine's ``co_read``), so the agent adds no system call of its own to a stop;
    a separate one cost 2-3 us more (a 64 KiB window and six small ranges, read cold 4,000 times each way,
    alternated). The bytes are laid out as ``ScatterReader.begin`` lays them out, so the plan's offsets hold.
    One per thread: the thread's next snapshot overwrites it, so it must be walked before that (the sampler
    walks a tick's snapshots in the same tick). The buffer and the iovecs are made when the plan is
    (``fit``), never during a stop: allocating there would lengthen it. ``plan`` is the plan it was fit for
    and copies, and is not changed between a copy and its walk: plans are rebuilt between ticks, or in the
    stop of a walk in full, which copies no snapshot."""

    __slots__ = ("tid", "plan", "done", "buffer", "base", "view", "extra", "_local", "_remote", "_remotes", "_pair",
                 "_locals", "readv")

    def __init__(self, readv: Readv = process_vm_readv) -> None:
        self.readv = readv
        self.tid = 0
        self.plan = EMPTY_PLAN
        self.done = 0  #: planned iovecs ``[0, done)`` were copied completely
        self.buffer = ctypes.create_string_buffer(0)
        self.base = ctypes.addressof(self.buffer)
        self.view = memoryview(self.buffer).cast("B")
        self._local = (ctypes.c_uint64 * 2)(self.base, 0)
        #: the copy with a stack window: local iovecs (the window's, then the plan's place, then the extra's),
        #: remote iovecs (the window's, then the plan's ranges, then the extra's)
        self._pair = (ctypes.c_uint64 * 6)()
        self._locals = 2  #: local iovecs of the copy with a stack window: 3 with an ``extra``
        self._remote = (ctypes.c_uint64 * 2)()
        self._remotes = 1  #: remote iovecs of that copy
        #: another snapshot copied after this one's ranges, by the same ``read_with_stack`` (``attach``)
        self.extra: Snapshot | None = None

    def fit(self, plan: ReadPlan) -> None:
        """Make room for ``plan``, and the iovecs of its copies (after resume, when the plan is built)."""
        if len(self.buffer) < plan.total:
            # whole pages, so that a plan that grows a little does not reallocate every time
            size = -(-plan.total // PAGE_SIZE) * PAGE_SIZE
            self.buffer = ctypes.create_string_buffer(size)
            self.base = ctypes.addressof(self.buffer)
            self.view = memoryview(self.buffer).cast("B")
            self._local[0] = self.base
        self.plan = plan
        self._fit_iovecs()

    def attach(self, extra: Snapshot | None) -> None:
        """After resume: have the copy with a stack window (``read_with_stack``) copy ``extra``'s ranges as
        well, after this one's (None: no more). Its ``done`` is then set by each such copy. Not attached if
        both plans would not fit one ``process_vm_readv`` (``IOV_MAX``, ``_fit_iovecs``): ``take`` copies it
        then."""
        if extra is not self.extra:
            self.extra = extra
            self._fit_iovecs()

    def _fit_iovecs(self) -> None:
        """The iovecs of a copy with a stack window: the window's, this plan's, then ``extra``'s."""
        plan, extra = self.plan, self.extra
        if extra is not None and 1 + plan.count + extra.plan.count > IOV_MAX:
            self.extra = extra = None  # too many for one read (or this plan grew past it since ``attach``)
        count = plan.count + (extra.plan.count if extra is not None else 0)
        remote = (ctypes.c_uint64 * (2 + 2 * count))()
        # (a c_uint64 array takes ints, which typeshed's list invariance does not see)
        remote[2 : 2 + 2 * plan.count] = plan.remote[: 2 * plan.count]  # type: ignore[assignment]
        pair = self._pair
        pair[2] = self.base
        pair[3] = plan.total
        if extra is not None:
            remote[2 + 2 * plan.count :] = extra.plan.remote[: 2 * extra.plan.count]  # type: ignore[assignment]
            pair[4] = extra.base
            pair[5] = extra.plan.total
        self._remote = remote
        self._remotes = 1 + count
        self._locals = 2 if extra is None else 3

    def read_with_stack(self, tid: int, dest: int, addr: int, size: int) -> int:
        """During the stop, for the tracer: ``size`` bytes of the stack window at ``addr`` into ``dest``, and the
        ranges of its plan (and its ``extra``'s), with one ``process_vm_readv`` through the stopped thread
        ``tid``. Returns the window's bytes read (a short read stops at the first unmapped page, and copies
        nothing after it), or -errno; the plan's complete ranges are in ``done`` (and the extra's in its
        own)."""
        remote, pair, plan, extra = self._remote, self._pair, self.plan, self.extra
        remote[0] = addr
        remote[1] = pair[1] = size
        pair[0] = dest
        n: int = self.readv(tid, pair, self._locals, remote, self._remotes, 0)
        if n < 0:
            self.done = 0
            if extra is not None:
                extra.done = 0
            return -ctypes.get_errno()
        self.done = plan.complete(n - size)
        if extra is not None:
            extra.done = extra.plan.complete(n - size - plan.total) if self.done == plan.count else 0
        return min(n, size)

    def take(self, tid: int) -> None:
        """During the stop, without a stack window: copy every range of its plan with one syscall through the
        stopped thread ``tid``."""
        self.done = self.plan.copy(tid, self._local, self.readv) if self.plan.count else 0


class ScatterReader:
    """One capture's reads: ``begin`` with a plan, then ``get`` each address the walk needs."""

    __slots__ = ("pid", "buffer", "base", "view", "plan", "done", "tail", "misses", "missed", "syscalls",
                 "frozen", "readv", "_memory", "_own_view", "_local", "_remote", "_batch", "_window")

    def __init__(self, pid: int, capacity: int = BUFFER_BYTES, readv: Readv = process_vm_readv) -> None:
        self.pid = pid
        self.readv = readv  #: (``Readv``; the snapshots it serves are made with the same)
        # mmap'd rather than create_string_buffer, which would zero (and so make resident) every page
        self._memory = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.buffer = (ctypes.c_char * capacity).from_buffer(self._memory)
        self.base = ctypes.addressof(self.buffer)
        self.view = self._own_view = memoryview(self.buffer).cast("B")
        self.plan = EMPTY_PLAN
        self.done = 0  #: planned iovecs ``[0, done)`` were read completely
        self.tail = 0
        self.misses = 0
        #: the first range a ``replay`` walk needed that its snapshot did not hold (None: none)
        self.missed: tuple[int, int] | None = None
        self.syscalls = 0
        #: read nothing from the target: every range the last ``begin`` (or ``replay``) did not copy is
        #: unreadable, and counted as a miss. For a walk over bytes copied earlier while the thread runs.
        self.frozen = False
        # iovecs as u64 pairs (iov_base, iov_len), as in ReadPlan: the destination in the buffer, one range
        # of the target, and a batch of ranges (``read_ranges``)
        self._local = (ctypes.c_uint64 * 2)(self.base, 0)
        self._remote = (ctypes.c_uint64 * 2)()
        self._batch = (ctypes.c_uint64 * (2 * IOV_MAX))()
        #: the pages the last ``read_one`` copied: (remote start, remote end, buffer offset)
        self._window = _NO_WINDOW

    def begin(self, plan: ReadPlan) -> None:
        """Prefetch every planned range with one syscall."""
        self.plan = plan
        self.view = self._own_view
        self.misses = 0
        self.syscalls = 0
        self.tail = plan.total
        self.done = 0
        self._window = _NO_WINDOW
        if plan.count:
            self._local[0] = self.base
            self.done = plan.copy(self.pid, self._local, self.readv)
            self.syscalls = 1

    def replay(self, snapshot: Snapshot) -> None:
        """Walk a snapshot instead of the target, with every thread running: the walk sees exactly what a
        walk during the stop would have seen of the planned ranges; anything else it needs is a miss
        (counted in ``misses``) and unreadable. ``end_replay`` returns to the reader's own buffer."""
        self.plan = snapshot.plan
        self.view = snapshot.view
        self.done = snapshot.done
        self.tail = snapshot.plan.total
        self.misses = 0
        self.missed = None
        self.syscalls = 0
        self._window = _NO_WINDOW
        self.frozen = True

    def end_replay(self) -> None:
        self.view = self._own_view
        self.plan = EMPTY_PLAN
        self.frozen = False

    def fetch(self, ranges: FixedRanges) -> bool:
        """After resume (the reader's capture is over): copy ``ranges`` to the buffer's start; False unless
        every one was copied whole."""
        self.view = self._own_view
        return ranges.total <= len(self.buffer) and ranges.copy(self.pid, self._local, self.base, self.readv)

    def unread_range(self) -> tuple[int, int] | None:
        """The planned range the last ``begin`` stopped at, unreadable now (the kernel stops at the first
        remote iovec that faults, so the ones after it were not tried); None if the whole plan was read."""
        plan, i = self.plan, self.done
        if i >= plan.count:
            return None
        return plan.remote[2 * i], plan.remote[2 * i + 1]

    def u64(self, offset: int) -> int:
        value: int = _U64.unpack_from(self.view, offset)[0]
        return value

    def get(self, addr: int, size: int) -> int:
        """Buffer offset of ``size`` bytes copied from ``addr`` during this stop, or -1 if unreadable."""
        off = self.plan.find(addr, size, self.done)
        return off if off >= 0 else self.read_one(addr, size)

    def read_one(self, addr: int, size: int) -> int:
        """Read one range that the plan did not cover: the whole pages it lies in, with one syscall, kept as
        this capture's window, so that the next reads inside those pages need none.

        Frame objects of 3.8-3.10 come from pymalloc pools in allocation order, ~450 bytes apart, so a walk
        from the newest frame down a chain the plan has not met (a deep recursion built anew since the last
        sample) finds ~9 of them per page: 3000 of them were read one syscall each, 5 ms in the stop. A
        whole page is readable wherever a byte of it is (the kernel maps and protects memory by page), so
        the longer read cannot fault where the exact one would not."""
        self.misses += 1
        start, end, offset = self._window
        if start <= addr and addr + size <= end:
            return offset + addr - start
        offset = self.tail
        if self.frozen:
            if self.missed is None:
                self.missed = (addr, size)
            return -1
        if offset + size > len(self.buffer):
            return -1
        start = addr & -PAGE_SIZE
        end = (addr + size + PAGE_SIZE - 1) & -PAGE_SIZE
        if offset + end - start > len(self.buffer):
            start, end = addr, addr + size  # no room left for whole pages
        local, remote = self._local, self._remote
        local[0] = self.base + offset
        local[1] = remote[1] = end - start
        remote[0] = start
        self.syscalls += 1
        n = self.readv(self.pid, local, 1, remote, 1, 0)
        if n < addr + size - start:  # a short read of whole pages stops at a page the range needs too
            return -1
        self._window = (start, start + n, offset)
        self.tail = offset + n
        return offset + addr - start

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[int]:
        """Read independent ranges (code headers, the first bytes of a new code object's strings) with one
        scatter read per ``IOV_MAX``: the buffer offset of each, -1 for one not read whole. The kernel stops
        at the first remote iovec that faults: that one is given up, and those after it read again. Not
        misses: plans do not hold what is read here (``capture.py``)."""
        out = [-1] * len(ranges)
        if self.frozen:
            return out
        start, batch = 0, self._batch
        while start < len(ranges):
            chunk = ranges[start : start + IOV_MAX]
            ends, end = [], 0
            for j, (addr, size) in enumerate(chunk):
                batch[2 * j] = addr
                batch[2 * j + 1] = size
                end += size
                ends.append(end)
            offset = self.tail
            if offset + end > len(self.buffer):
                break
            self._local[0] = self.base + offset
            self._local[1] = end
            self.syscalls += 1
            n = self.readv(self.pid, self._local, 1, batch, len(chunk), 0)
            complete = bisect.bisect_right(ends, n) if n > 0 else 0
            for j in range(complete):
                out[start + j] = offset + ends[j] - chunk[j][1]
            self.tail = offset + (ends[complete - 1] if complete else 0)
            start += complete if complete == len(chunk) else complete + 1  # past the one that faulted
        return out
