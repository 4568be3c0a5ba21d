"""Word reads from a copied stack window: the only memory the unwinders ever see.

``memoryview.cast('Q')`` indexing is the cheapest u64 read in CPython (23 ns, ptrace-costs.md section 4),
so an 8-aligned window is read through it; an unaligned one falls back to ``struct``.
"""

from __future__ import annotations

import struct

U64 = struct.Struct("<Q")


class StackWindow:
    """The bytes ``[base, base + len)`` of the target's stack as copied at the stop.

    ``full`` says the copy was cut by the window size (not by the end of the stack mapping), so an
    address above it is "window exhausted" rather than "not on the stack". ``home`` is a second copy, of the
    top of the thread's own stack, for a thread stopped on another one (a signal handler on an alternate
    signal stack): the frames it interrupted are there.
    """

    __slots__ = ("base", "end", "full", "home", "words", "_bytes")

    def __init__(self, data: memoryview | bytes, base: int, full: bool, home: StackWindow | None = None) -> None:
        n = len(data) & ~7
        self.base = base
        self.end = base + n
        self.full = full
        self.home = home
        view = memoryview(data)[:n]
        self._bytes = view
        self.words = view.cast("B").cast("Q") if base & 7 == 0 else None

    def read(self, addr: int) -> int | None:
        """The u64 at ``addr``, or None if it is not inside the window."""
        off = addr - self.base
        if off < 0 or addr + 8 > self.end:
            return self.home.read(addr) if self.home is not None else None
        if self.words is not None and off & 7 == 0:
            return self.words[off >> 3]
        value: int = U64.unpack_from(self._bytes, off)[0]
        return value

    def contains(self, addr: int, size: int = 8) -> bool:
        if self.base <= addr and addr + size <= self.end:
            return True
        return self.home is not None and self.home.contains(addr, size)
