"""Instruction offset -> source line, for the three line-table formats of CPython 3.8-3.14: ``co_lnotab``
(3.8/3.9), ``co_linetable`` (3.10) and the location table (3.11+).

Each table is decoded once into sorted ranges, following CPython's own C decoders where its documentation
could differ at a boundary; a lookup is one bisect. Offsets are in the unit a ``RuntimeFrame`` carries
(bytes for 3.8/3.9, code units from 3.10); an offset before the first instruction gives ``co_firstlineno``.
Each format's rules and sources: docs/decisions/python-line-tables.md."""

from __future__ import annotations

import bisect

from agents.cpython.layout import LineTableFormat

#: a line table longer than this is treated as corrupt (the biggest stdlib tables are a few tens of KiB)
MAX_TABLE_BYTES = 1 << 20


class CodeLineTable:
    """Sorted ranges ``[starts[i], ends[i])`` with their line (None: no line), plus ``co_firstlineno``."""

    __slots__ = ("starts", "ends", "lines", "firstlineno", "scale")

    def __init__(self, firstlineno: int, scale: int = 1) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.lines: list[int | None] = []
        self.firstlineno = firstlineno
        self.scale = scale  #: table units per offset unit (2 for 3.10: byte ranges, code-unit offsets)

    def add(self, start: int, end: int, line: int | None) -> None:
        if end > start:
            self.starts.append(start)
            self.ends.append(end)
            self.lines.append(line)

    def line(self, offset: int) -> int | None:
        """The line of the instruction at ``offset``; None where the table says "no line" or ends early."""
        if offset < 0:
            return self.firstlineno
        addr = offset * self.scale
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.lines[i]
        return None


class LnotabTable(CodeLineTable):
    """3.8/3.9: the line is the sum of the increments of every pair whose running address is <= offset."""

    __slots__ = ()

    def line(self, offset: int) -> int | None:
        if offset < 0:
            return self.firstlineno
        k = bisect.bisect_right(self.starts, offset)
        return self.lines[k - 1] if k else self.firstlineno


def _signed_byte(b: int) -> int:
    return b - 256 if b >= 128 else b


def decode_lnotab(table: bytes, firstlineno: int) -> CodeLineTable:
    """3.8/3.9 ``co_lnotab``; ``starts`` holds each pair's running address, ``lines`` the line after it."""
    out = LnotabTable(firstlineno)
    addr, line = 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        addr += table[i]
        line += _signed_byte(table[i + 1])
        out.starts.append(addr)
        out.lines.append(line)
    return out


def decode_linetable_310(table: bytes, firstlineno: int) -> CodeLineTable:
    """3.10 ``co_linetable`` (byte ranges; offsets are code units)."""
    out = CodeLineTable(firstlineno, scale=2)
    start, line = 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        end = start + table[i]
        delta = _signed_byte(table[i + 1])
        if delta == -128:
            out.add(start, end, None)
        else:
            line += delta
            out.add(start, end, line)
        start = end
    return out


def _signed_varint(table: bytes, i: int) -> int:
    """``scan_signed_varint`` (Objects/codeobject.c, 3.11+): 6-bit little-endian chunks, bit 6 = more."""
    n = len(table)
    read = table[i] if i < n else 0
    value, shift = read & 63, 0
    while read & 64 and i + 1 < n and shift < 30:
        i += 1
        read = table[i]
        shift += 6
        value |= (read & 63) << shift
    return -(value >> 1) if value & 1 else value >> 1


def decode_locations(table: bytes, firstlineno: int) -> CodeLineTable:
    """3.11+ location table (ranges and offsets in code units)."""
    out = CodeLineTable(firstlineno)
    n = len(table)
    i, addr, line = 0, 0, firstlineno
    while i < n:
        first = table[i]
        if not first & 0x80:
            break  # not at an entry start: the table is corrupt, keep what was decoded
        code = (first >> 3) & 15
        length = (first & 7) + 1
        if code == 15:
            out.add(addr, addr + length, None)
        else:
            if code in (13, 14):
                line += _signed_varint(table, i + 1)
            elif code >= 10:
                line += code - 10
            out.add(addr, addr + length, line)
        addr += length
        i += 1
        while i < n and not table[i] & 0x80:
            i += 1
    return out


_DECODERS = {
    LineTableFormat.LNOTAB: decode_lnotab,
    LineTableFormat.LINETABLE_310: decode_linetable_310,
    LineTableFormat.LOCATIONS: decode_locations,
}


def decode(fmt: LineTableFormat, table: bytes, firstlineno: int) -> CodeLineTable:
    """Decode a table of format ``fmt``; a corrupt or oversized table yields what could be decoded."""
    return _DECODERS[fmt](table[:MAX_TABLE_BYTES], firstlineno)
