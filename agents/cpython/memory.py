"""Reading the target's memory outside a stop: typed reads with every pointer checked before it is followed.

The agent never trusts a byte it reads (DESIGN.md section 5). A pointer is followed only when it is
*plausible*: non-zero, inside the x86-64 user half of the address space, and aligned as the object it should
point to. An unmapped or freed address is not an error: ``process_vm_readv`` fails (EFAULT) and the read
returns fewer bytes than asked, which every caller treats as "not there".

``Read`` is the one primitive: ``TargetProcess.read`` in production, a dict of byte snapshots in unit tests.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

#: ``read(addr, size) -> bytes``: the bytes at ``addr``, shorter than ``size`` (or empty) where unreadable
Read = Callable[[int, int], bytes]
#: ``read_ranges([(addr, size), ...]) -> [bytes, ...]``: ``Read`` for several ranges, in as few system calls
#: as the caller can (one scatter read, in a stop)
ReadRanges = Callable[[list[tuple[int, int]]], list[bytes]]

#: x86-64 user addresses are below 2**47 (4-level paging; Linux keeps 5-level user space below 2**47 unless
#: a program asks for more with mmap hints, which CPython does not)
USER_LIMIT = 1 << 47
#: PyObject_Malloc and malloc return 16-byte aligned blocks on x86-64 glibc; 8 is the safe lower bound
OBJECT_ALIGN = 8

_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


def plausible(ptr: int, align: int = OBJECT_ALIGN) -> bool:
    """A pointer worth following: non-NULL, in user space, aligned."""
    return 4096 <= ptr < USER_LIMIT and ptr % align == 0


class Prefetched:
    """A ``Read`` that serves reads at the addresses one scatter read fetched, as far as it fetched them, and
    reads anything else with ``read``."""

    __slots__ = ("_heads", "_read")

    def __init__(self, heads: dict[int, bytes], read: Read) -> None:
        self._heads = heads
        self._read = read

    def __call__(self, addr: int, size: int) -> bytes:
        head = self._heads.get(addr)
        if head is not None and size <= len(head):
            return head[:size]
        return self._read(addr, size)


def read_exact(read: Read, addr: int, size: int) -> bytes | None:
    """``size`` bytes at ``addr``, or None if the pointer is implausible or any byte is unreadable."""
    if size <= 0 or not 4096 <= addr < USER_LIMIT:
        return None
    data = read(addr, size)
    return data if len(data) == size else None


def read_u64(read: Read, addr: int) -> int | None:
    data = read_exact(read, addr, 8)
    return None if data is None else _U64.unpack(data)[0]


def read_pointer(read: Read, addr: int) -> int | None:
    """A pointer field; None when unreadable *or* implausible, 0 stays 0 (NULL is data, not an error)."""
    value = read_u64(read, addr)
    if value is None or (value and not plausible(value)):
        return None
    return value


def u64(data: bytes | memoryview, offset: int) -> int:
    value: int = _U64.unpack_from(data, offset)[0]
    return value


def i64(data: bytes | memoryview, offset: int) -> int:
    value: int = _I64.unpack_from(data, offset)[0]
    return value


def u32(data: bytes | memoryview, offset: int) -> int:
    value: int = struct.unpack_from("<I", data, offset)[0]
    return value


def i32(data: bytes | memoryview, offset: int) -> int:
    value: int = struct.unpack_from("<i", data, offset)[0]
    return value
