"""Unit headers of ``.debug_info`` (DWARF 5, section 7.5.1) and the address table ``.debug_aranges``
(section 6.1.2): the two structures that lead from an address to the one unit worth parsing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_constants import (
    DW_UT_compile,
    DW_UT_skeleton,
    DW_UT_split_compile,
    DW_UT_split_type,
    DW_UT_type,
)  # fmt: skip
from profiler.symbolize.dwarf_forms import UnitFormat
from profiler.symbolize.dwarf_reader import Cursor

#: versions this reader understands (DWARF 2 to 5; the unit header changed in 5)
SUPPORTED_VERSIONS = range(2, 6)
#: more units than this in one file is treated as corrupt (libc has 4,126; big C++ programs 100,000)
MAX_UNITS = 1_000_000


@dataclass(frozen=True)
class UnitHeader:
    offset: int  #: where the unit (its initial length) starts in .debug_info
    end: int  #: offset just past the unit
    die_offset: int  #: its first DIE
    unit_type: int
    abbrev_offset: int
    fmt: UnitFormat


def read_unit_header(info: bytes, offset: int) -> UnitHeader:
    """The unit header at ``offset`` (section 7.5.1.1 for version 5, 7.5.1 of DWARF 4 before)."""
    cursor = Cursor(info, offset)
    length, offset_size = cursor.initial_length()
    cursor.end = cursor.pos + length
    end = cursor.end
    version = cursor.u16()
    if version not in SUPPORTED_VERSIONS:
        raise BinaryError(f"unit at 0x{offset:x}: unsupported DWARF version {version}")
    if version >= 5:
        unit_type, address_size, abbrev_offset = cursor.u8(), cursor.u8(), cursor.uint(offset_size)
        if unit_type in (DW_UT_skeleton, DW_UT_split_compile):
            cursor.skip(8)  # dwo_id
        elif unit_type in (DW_UT_type, DW_UT_split_type):
            cursor.skip(8 + offset_size)  # type_signature, type_offset
    else:
        unit_type, abbrev_offset, address_size = DW_UT_compile, cursor.uint(offset_size), cursor.u8()
    if address_size not in (4, 8):
        raise BinaryError(f"unit at 0x{offset:x}: address size {address_size}")
    return UnitHeader(offset, end, cursor.pos, unit_type, abbrev_offset, UnitFormat(version, offset_size, address_size))


def iter_unit_headers(info: bytes) -> Iterator[UnitHeader]:
    """Every unit header of .debug_info in order; stops with BinaryError at the first unreadable one."""
    offset = 0
    for _ in range(MAX_UNITS):
        if offset >= len(info):
            return
        header = read_unit_header(info, offset)
        yield header
        offset = header.end  # > offset: an initial length field is at least 4 bytes
    raise BinaryError(f"more than {MAX_UNITS} units in .debug_info")


def read_aranges(section: bytes) -> list[tuple[int, int, int]]:
    """(start, end, unit offset) for every range of .debug_aranges (section 6.1.2).

    Each set's tuples start at a multiple of the tuple size from the start of the set (gcc pads its
    header explicitly; LLVM reads it the same way). Sets with a segment selector are skipped: no x86-64
    producer emits them.
    """
    triples: list[tuple[int, int, int]] = []
    offset = 0
    for _ in range(MAX_UNITS):
        if offset >= len(section):
            return triples
        cursor = Cursor(section, offset)
        length, offset_size = cursor.initial_length()
        cursor.end = end = cursor.pos + length
        cursor.u16()  # version: 2 in every DWARF version that has this section
        unit_offset, address_size, segment_size = cursor.uint(offset_size), cursor.u8(), cursor.u8()
        if address_size in (4, 8) and segment_size == 0:
            tuple_size = 2 * address_size
            cursor.skip(-(cursor.pos - offset) % tuple_size)
            while cursor.pos + tuple_size <= end:
                start, size = cursor.uint(address_size), cursor.uint(address_size)
                if start == 0 and size == 0:
                    break
                triples.append((start, start + size, unit_offset))
        offset = end
    raise BinaryError(f"more than {MAX_UNITS} sets in .debug_aranges")
