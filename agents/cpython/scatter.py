"""Copying a thread's frame chain during a stop in as few ``process_vm_readv`` calls as possible.

A frame chain is a linked list: each frame's address is known only after its newer neighbour was read, so a
naive walk costs one syscall per frame. Here ``process_vm_readv`` costs ~4-5 us per call whatever its size,
and ~0.6 us per extra remote iovec (measured on this machine kind: 8 bytes or 4 KiB alike), so a 10-frame
stack would keep the thread stopped ~50 us for its reads alone.

But a thread's chain changes little between two samples. So each thread keeps a ``ReadPlan``: the
ranges its previous capture needed (thread state, frames, code-object headers), coalesced where they are
close (3.11+ frames sit next to each other in the data stack). One scatter read fetches them all at the
start of the next capture; the walk then takes each frame from that copy if its address was in the plan and
reads only the addresses that are new. The copy is exact, not a guess: every byte was read during *this*
stop, so whatever lives at a planned address now is what the walk sees. A stale plan only costs the extra
reads, and a planned address that became unmapped just ends the scatter read early (the kernel stops at the
first faulting remote iovec); the walk then reads the rest one by one.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import struct

# python-ptrace has no process_vm_readv; profiler.target.ptrace binds it through ctypes, without argtypes
# (iovec arrays go as their address, counts as C ints). Its binding is reused here rather than declared a
# second time. Every iovec here is a pair of u64s (iov_base, iov_len): the kernel's struct iovec on x86-64.
from profiler.target.ptrace import _process_vm_readv as process_vm_readv

_U64 = struct.Struct("<Q")

#: Linux UIO_MAXIOV: the most iovecs one process_vm_readv accepts
IOV_MAX = 1024
#: ranges whose gap is at most this are read as one iovec. A remote iovec costs ~0.6 us (pinning its pages
#: separately) and a page inside one costs ~0.25 us, so merging across up to one extra page pays. The gap
#: must stay below a page: then the merged range only touches pages that hold bytes of its two ends, which
#: were readable, so the merge cannot run into an unmapped page in between.
COALESCE_GAP = 4095
#: the copy area of one capture: plan ranges first, then the addresses read one by one
BUFFER_BYTES = 2 << 20
#: most bytes a plan may cover (the rest of the buffer is for the walk's individual reads)
MAX_PLAN_BYTES = 256 << 10


#: ranges a plan that missed keeps from before at least (``next_ranges``): a recursive fib(22) used 24
#: distinct frame objects on 3.8 and 3.10 (a 17-frame median stack); a range costs ~0.6 us in the kernel
#: unless it merges with a neighbour
KEEP_MIN = 64


#: the kernel maps memory in pages: a range that ends inside a page can grow to that page's end and still
#: touch only pages it already touched, so the longer read cannot fault where the shorter one did not. The
#: target runs on this machine's kernel, so its page size is ours.
PAGE_SIZE = mmap.PAGESIZE


class ReadPlan:
    """Remote ranges to prefetch, and where each planned address lands in the buffer."""

    __slots__ = ("count", "remote", "ends", "total", "where", "_starts", "_spans")

    def __init__(self, ranges: list[tuple[int, int]], where: dict[int, tuple[int, int, int]]) -> None:
        self.count = len(ranges)
        # iovec arrays as flat u64 pairs: setting a u64 costs ~60 ns, a ctypes struct field ~300 ns
        self.remote = (ctypes.c_uint64 * (2 * max(self.count, 1)))()
        self.ends: list[int] = []
        total = 0
        for i, (addr, size) in enumerate(ranges):
            self.remote[2 * i] = addr
            self.remote[2 * i + 1] = size
            total += size
            self.ends.append(total)
        self.total = total
        self.where = where  #: addr -> (buffer offset, size, iovec index)
        #: every range as (remote start, remote end, buffer offset, iovec index), by start (``find``)
        spans = sorted(
            (addr, addr + size, end - size, i) for i, ((addr, size), end) in enumerate(zip(ranges, self.ends))
        )
        self._starts = [span[0] for span in spans]
        self._spans = spans

    def copy(self, pid: int, local: ctypes.Array) -> int:
        """Copy every range with one ``process_vm_readv`` into the buffer whose address is ``local[0]``
        (``local`` is one iovec as a u64 pair); returns how many ranges were copied completely (the kernel
        stops at the first remote iovec that faults)."""
        local[1] = self.total
        n = process_vm_readv(pid, local, 1, self.remote, self.count, 0)
        return bisect.bisect_right(self.ends, n) if n > 0 else 0

    def find(self, addr: int, size: int, done: int) -> int:
        """Buffer offset of ``size`` bytes at ``addr`` inside the ranges copied completely (iovec index below
        ``done``); -1 if none holds them. A planned address is found by its entry in ``where``; any other
        inside a range, which covers a frame the chain gained where a range spans more than the frames it
        was built from (coalesced neighbours, the rest of the newest frame's page)."""
        hit = self.where.get(addr)
        if hit is not None and hit[1] >= size and hit[2] < done:
            return hit[0]
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return -1
        start, end, offset, index = self._spans[i]
        if addr + size > end or index >= done:
            return -1
        return offset + addr - start


EMPTY_PLAN = ReadPlan([], {})


def build_plan(fixed: list[tuple[int, int]], rest: list[tuple[int, int]]) -> ReadPlan:
    """A plan for what a capture read: the ``fixed`` reads first and in order (the thread state and the
    like: they decide whether the rest is needed, so a fault in the tail cannot cost them), then the
    ``rest`` (frames, code headers) sorted by address and coalesced."""
    sizes: dict[int, int] = {}
    for addr, size in rest:
        if sizes.get(addr, 0) < size:
            sizes[addr] = size
    ranges: list[tuple[int, int]] = list(fixed)
    members: list[list[tuple[int, int]]] = [[entry] for entry in fixed]
    total = sum(size for _, size in ranges)
    first_sorted = len(ranges)
    for addr in sorted(sizes):
        size = sizes[addr]
        if len(ranges) > first_sorted:
            start, length = ranges[-1]
            end = start + length
            if addr - end <= COALESCE_GAP:
                new_end = max(end, addr + size)
                if total + new_end - end > MAX_PLAN_BYTES:
                    break
                ranges[-1] = (start, new_end - start)
                total += new_end - end
                members[-1].append((addr, size))
                continue
        if len(ranges) >= IOV_MAX or total + size > MAX_PLAN_BYTES:
            break
        ranges.append((addr, size))
        members.append([(addr, size)])
        total += size
    where: dict[int, tuple[int, int, int]] = {}
    offset = 0
    for index, ((start, length), group) in enumerate(zip(ranges, members)):
        for addr, size in group:
            if addr not in where or where[addr][1] < size:
                where[addr] = (offset + addr - start, size, index)
        offset += length
    return ReadPlan(ranges, where)


def next_ranges(
    old: list[tuple[int, int]], needed: list[tuple[int, int]], unread: tuple[int, int] | None
) -> list[tuple[int, int]]:
    """What the next plan should cover besides the fixed reads, after a capture that missed reads: the
    ranges it ``needed``, and those of the ``old`` plan it did not, at most ``KEEP_MIN`` of them or as many
    as it needed.

    A stack that changes between samples mostly comes back to frames it used before: 3.8-3.10 allocate
    each call's frame object from a LIFO free list, so a recursion that goes deeper and shallower again
    reuses the same few objects, and a plan of only the last capture's frames missed each of them in turn,
    one ``process_vm_readv`` per frame during the stop (a median of 5 per capture on a recursive ``fib``).
    An old range inside ``unread``, the planned range the capture's prefetch could not read (a freed
    frame's memory returned to the system), is not kept: the kernel stops at the first range that faults,
    so it would cut every later prefetch short. A plan grown past twice what a capture needs is rebuilt
    from that capture alone (``ChainCopier.copy`` asks for it)."""
    lo, hi = (unread[0], unread[0] + unread[1]) if unread else (0, 0)
    addrs = {addr for addr, _size in needed}
    kept = [entry for entry in old if entry[0] not in addrs and not lo <= entry[0] < hi]
    return needed + kept[: max(KEEP_MIN, len(needed))]


class Snapshot:
    """The bytes of one thread's read plan, copied during its stop by one ``process_vm_readv`` and kept for
    the walk after resume (``ScatterReader.replay``): the least an agent can do while the thread is stopped.

    The bytes are laid out as ``ScatterReader.begin`` lays them out, so the plan's offsets hold. One per
    thread: the thread's next snapshot overwrites it, so it must be walked before that (the sampler walks
    a tick's snapshots in the same tick). The buffer is sized when the plan is made (``fit``), never during
    a stop: allocating there would lengthen the stop."""

    __slots__ = ("tid", "plan", "done", "buffer", "base", "view", "_local")

    def __init__(self) -> None:
        self.tid = 0
        self.plan = EMPTY_PLAN
        self.done = 0  #: planned iovecs ``[0, done)`` were copied completely
        self.buffer = ctypes.create_string_buffer(0)
        self.base = ctypes.addressof(self.buffer)
        self.view = memoryview(self.buffer).cast("B")
        self._local = (ctypes.c_uint64 * 2)(self.base, 0)

    def fit(self, plan: ReadPlan) -> None:
        """Make room for ``plan`` (after resume, when the plan is built)."""
        if len(self.buffer) < plan.total:
            # whole pages, so that a plan that grows a little does not reallocate every time
            size = -(-plan.total // PAGE_SIZE) * PAGE_SIZE
            self.buffer = ctypes.create_string_buffer(size)
            self.base = ctypes.addressof(self.buffer)
            self.view = memoryview(self.buffer).cast("B")
            self._local[0] = self.base

    def take(self, pid: int, tid: int, plan: ReadPlan) -> bool:
        """During the stop: copy every planned range with one syscall. False if the plan is empty or does
        not fit (it was rebuilt and not yet ``fit``): the caller walks in the stop instead."""
        if not plan.count or plan.total > len(self.buffer):
            return False
        self.done = plan.copy(pid, self._local)
        self.tid = tid
        self.plan = plan
        return True


class ScatterReader:
    """One capture's reads: ``begin`` with a plan, then ``get`` each address the walk needs."""

    __slots__ = ("pid", "buffer", "base", "view", "plan", "done", "tail", "misses", "syscalls", "frozen",
                 "_own_view", "_local", "_remote", "_batch")

    def __init__(self, pid: int, capacity: int = BUFFER_BYTES) -> None:
        self.pid = pid
        self.buffer = ctypes.create_string_buffer(capacity)
        self.base = ctypes.addressof(self.buffer)
        self.view = self._own_view = memoryview(self.buffer).cast("B")
        self.plan = EMPTY_PLAN
        self.done = 0  #: planned iovecs ``[0, done)`` were read completely
        self.tail = 0
        self.misses = 0
        self.syscalls = 0
        #: read nothing from the target: every range the last ``begin`` (or ``replay``) did not copy is
        #: unreadable, and counted as a miss. For a walk over bytes copied earlier while the thread runs.
        self.frozen = False
        # iovecs as u64 pairs (iov_base, iov_len), as in ReadPlan: the destination in the buffer, one range
        # of the target, and a batch of ranges (``read_many``)
        self._local = (ctypes.c_uint64 * 2)(self.base, 0)
        self._remote = (ctypes.c_uint64 * 2)()
        self._batch = (ctypes.c_uint64 * (2 * IOV_MAX))()

    def begin(self, plan: ReadPlan) -> None:
        """Prefetch every planned range with one syscall."""
        self.plan = plan
        self.view = self._own_view
        self.misses = 0
        self.syscalls = 0
        self.tail = plan.total
        self.done = 0
        if plan.count:
            self._local[0] = self.base
            self.done = plan.copy(self.pid, self._local)
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
        self.syscalls = 0
        self.frozen = True

    def end_replay(self) -> None:
        self.view = self._own_view
        self.plan = EMPTY_PLAN
        self.frozen = False

    def unread_range(self) -> tuple[int, int] | None:
        """The planned range the last ``begin`` stopped at, unreadable now (the kernel stops at the first
        remote iovec that faults, so the ones after it were not tried); None if the whole plan was read."""
        plan, i = self.plan, self.done
        if i >= plan.count:
            return None
        return plan.remote[2 * i], plan.remote[2 * i + 1]

    def u64(self, offset: int) -> int:
        return _U64.unpack_from(self.view, offset)[0]

    def get(self, addr: int, size: int) -> int:
        """Buffer offset of ``size`` bytes copied from ``addr`` during this stop, or -1 if unreadable."""
        off = self.plan.find(addr, size, self.done)
        return off if off >= 0 else self.read_one(addr, size)

    def read_one(self, addr: int, size: int) -> int:
        """Read one range that the plan did not cover (one syscall)."""
        self.misses += 1
        offset = self.tail
        if offset + size > len(self.buffer) or self.frozen:
            return -1
        local, remote = self._local, self._remote
        local[0] = self.base + offset
        local[1] = remote[1] = size
        remote[0] = addr
        self.syscalls += 1
        if process_vm_readv(self.pid, local, 1, remote, 1, 0) != size:
            return -1
        self.tail = offset + size
        return offset

    def read_many(self, addrs: list[int], size: int) -> list[int]:
        """Read independent ranges the plan did not cover (code headers) with one scatter read per
        ``IOV_MAX``; -1 for an unreadable one."""
        out = [-1] * len(addrs)
        if self.frozen:
            self.misses += len(addrs)
            return out
        pending = list(range(len(addrs)))
        while pending:
            chunk = pending[:IOV_MAX]
            offset = self.tail
            if offset + size * len(chunk) > len(self.buffer):
                break
            batch = self._batch
            for j, i in enumerate(chunk):
                batch[2 * j] = addrs[i]
                batch[2 * j + 1] = size
            self._local[0] = self.base + offset
            self._local[1] = size * len(chunk)
            self.syscalls += 1
            self.misses += len(chunk)
            n = process_vm_readv(self.pid, self._local, 1, batch, len(chunk), 0)
            complete = max(n, 0) // size
            for j, i in enumerate(chunk[:complete]):
                out[i] = offset + j * size
            self.tail = offset + complete * size
            # the kernel stops at the first faulting iovec: that one stays -1, the rest are tried again
            pending = pending[complete + 1 :]
        return out
