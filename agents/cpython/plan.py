"""A thread's read plan: the remote ranges its next capture will copy in one ``process_vm_readv``.

A frame chain is a linked list: each frame's address is known only after its newer neighbour was read, so a
naive walk costs one syscall per frame (``scatter.py`` has the costs). But a thread's chain changes little
between two samples. So each thread keeps a ``ReadPlan``: the ranges its previous capture needed (thread
state, cframes, frames; not the code objects' headers, which are read after resume: ``capture.py``),
coalesced where they are close (3.11+ frames sit next to each other in the data stack), and where each
planned address lands in the copy. ``build_plan`` makes one from what a capture read; ``next_ranges``
decides what a plan that missed keeps from before.
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Callable

# the ctypes binding of profiler.target.ptrace, called as scatter.py calls it (iovecs as u64 pairs)
from profiler.target.ptrace import raw_process_vm_readv as process_vm_readv

#: Linux UIO_MAXIOV: the most iovecs one process_vm_readv accepts
IOV_MAX = 1024
#: ranges whose gap is at most this are read as one iovec. A remote iovec costs ~0.6 us (pinning its pages
#: separately) and a page inside one costs ~0.25 us, so merging across up to one extra page pays. The gap
#: must stay below a page: then the merged range only touches pages that hold bytes of its two ends, which
#: were readable, so the merge cannot run into an unmapped page in between.
COALESCE_GAP = 4095
#: most bytes a plan may cover (the rest of ``scatter.BUFFER_BYTES`` is for the walk's individual reads).
#: A chain that does not fit is captured again in full at every sample, in a second stop that reads frame
#: by frame: 0.4-1.8 ms held on a 600-900 deep recursion on 3.8/3.10, 4 ms on 3000, where each frame
#: object (read for its first 100 bytes) sits ~450 bytes from the next, so coalesced ranges cover ~450
#: bytes per frame. 2 MiB covers ~4600 such frames, more than a capture reads (``capture.MAX_FRAMES``);
#: at 256 KiB the cliff was at ~550.
MAX_PLAN_BYTES = 2 << 20
#: ranges a plan that missed keeps from before at least (``next_ranges``): a recursive fib(22) used 24
#: distinct frame objects on 3.8 and 3.10 (a 17-frame median stack); a range costs ~0.6 us in the kernel
#: unless it merges with a neighbour
KEEP_MIN = 64
#: captures a plan must serve without a miss before it may be cut back (``served_ranges``). A plan grows to
#: the union of the call paths its thread alternates between (json's dumps and loads): cut back to one
#: capture's reads at each sample that needed less than half of it, 19-38% of the samples of such programs
#: missed and were stopped twice; never cut back, it keeps what an earlier phase of the program used (a
#: varied warm-up, then a loop), which cost each of the loop's stops 10-30 us. A range no walk needed in
#: this many captures is dropped; the paths a thread keeps coming back to stay.
SHRINK_AFTER = 64


class ReadPlan:
    """Remote ranges to prefetch, and where each planned address lands in the buffer."""

    __slots__ = ("count", "remote", "ends", "total", "where", "touched", "_starts", "_spans")

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
        #: per range: found something a walk needed since the plan was built (``find``); what an oversized
        #: plan keeps when it is cut back (``served_ranges``)
        self.touched = bytearray(max(self.count, 1))
        #: every range as (remote start, remote end, buffer offset, iovec index), by start (``find``)
        spans = sorted(
            (addr, addr + size, end - size, i) for i, ((addr, size), end) in enumerate(zip(ranges, self.ends))
        )
        self._starts = [span[0] for span in spans]
        self._spans = spans

    def copy(
        self, pid: int, local: ctypes.Array[ctypes.c_uint64], readv: Callable[..., int] = process_vm_readv
    ) -> int:
        """Copy every range with one ``process_vm_readv`` into the buffer whose address is ``local[0]``
        (``local`` is one iovec as a u64 pair); returns how many ranges were copied completely (the kernel
        stops at the first remote iovec that faults)."""
        local[1] = self.total
        return self.complete(readv(pid, local, 1, self.remote, self.count, 0))

    def complete(self, n: int) -> int:
        """How many ranges a copy of the plan's ranges in order holds whole, ``n`` bytes long (or failed)."""
        return bisect.bisect_right(self.ends, n) if n > 0 else 0

    def find(self, addr: int, size: int, done: int) -> int:
        """Buffer offset of ``size`` bytes at ``addr`` inside the ranges copied completely (iovec index below
        ``done``); -1 if none holds them. A planned address is found by its entry in ``where``; any other
        inside a range, which covers a frame the chain gained where a range spans more than the frames it
        was built from (coalesced neighbours, the rest of the newest frame's page)."""
        hit = self.where.get(addr)
        if hit is not None and hit[1] >= size and hit[2] < done:
            self.touched[hit[2]] = 1
            return hit[0]
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return -1
        start, end, offset, index = self._spans[i]
        if addr + size > end or index >= done:
            return -1
        self.touched[index] = 1
        return offset + addr - start

    def served(self, addr: int) -> bool:
        """Whether the range that holds planned address ``addr`` has found anything for a walk."""
        hit = self.where.get(addr)
        return hit is not None and bool(self.touched[hit[2]])


EMPTY_PLAN = ReadPlan([], {})


class FixedRanges:
    """Ranges of one size, copied together to consecutive places (the headers of the code objects a thread's
    snapshots meet, read after resume: ``code_check.HeaderCheck``): their iovecs, built once, in batches of
    IOV_MAX, the most one ``process_vm_readv`` accepts."""

    __slots__ = ("size", "total", "_batches")

    def __init__(self, addrs: list[int], size: int) -> None:
        self.size = size
        self.total = size * len(addrs)  #: bytes copied in all; range i lands at ``i * size``
        #: (remote iovecs as u64 pairs, their count)
        self._batches: list[tuple[ctypes.Array[ctypes.c_uint64], int]] = []
        for first in range(0, len(addrs), IOV_MAX):
            batch = addrs[first : first + IOV_MAX]
            remote = (ctypes.c_uint64 * (2 * len(batch)))()
            # (a c_uint64 array takes ints, which typeshed's list invariance does not see)
            remote[0::2] = batch  # type: ignore[assignment]
            remote[1::2] = [size] * len(batch)
            self._batches.append((remote, len(batch)))

    def copy(
        self, pid: int, local: ctypes.Array[ctypes.c_uint64], base: int, readv: Callable[..., int] = process_vm_readv
    ) -> bool:
        """Copy every range to ``base`` on, one ``process_vm_readv`` per batch (``local``: one iovec as a u64
        pair); False unless every range was copied whole."""
        for remote, count in self._batches:
            length = count * self.size
            local[0] = base
            local[1] = length
            if readv(pid, local, 1, remote, count, 0) != length:
                return False
            base += length
        return True


def build_plan(fixed: list[tuple[int, int]], rest: list[tuple[int, int]]) -> ReadPlan:
    """A plan for what a capture read: the ``fixed`` reads first and in order (the thread state and the
    like: they decide whether the rest is needed, so a fault in the tail cannot cost them), then the
    ``rest`` (cframes, frames) sorted by address and coalesced."""
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
            new_end = max(end, addr + size)
            if addr - end <= COALESCE_GAP and total + new_end - end <= MAX_PLAN_BYTES:
                ranges[-1] = (start, new_end - start)
                total += new_end - end
                members[-1].append((addr, size))
                continue
            # too far to merge, or the merge's gap bytes would overrun the budget: a range of its own
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
    so it would cut every later prefetch short. A plan grown past twice what a capture needs is cut back,
    once it has served a while without a miss, to what its walks used (``served_ranges``)."""
    lo, hi = (unread[0], unread[0] + unread[1]) if unread else (0, 0)
    addrs = {addr for addr, _size in needed}
    kept = [entry for entry in old if entry[0] not in addrs and not lo <= entry[0] < hi]
    return needed + kept[: max(KEEP_MIN, len(needed))]


def served_ranges(plan: ReadPlan, old: list[tuple[int, int]], needed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """What a plan that read everything but grew past twice what a capture needs is cut back to, once it
    has served SHRINK_AFTER captures without a miss: the ranges that capture ``needed``, and those of the
    ``old`` plan (what ``plan`` was built from) that any walk of it used (``ReadPlan.touched``)."""
    return needed + [entry for entry in old if plan.served(entry[0])]
