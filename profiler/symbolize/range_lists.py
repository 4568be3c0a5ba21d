"""Non-contiguous address ranges of a DIE: DWARF 5 ``.debug_rnglists`` and DWARF 2-4 ``.debug_ranges``.

gcc gives a function that was split into hot and cold parts (``foo`` and ``foo.cold``), and most inlined
instances at -O2, a DW_AT_ranges list instead of DW_AT_low_pc/high_pc. Both readers stop at the list's
end marker, at ``MAX_ENTRIES`` entries, or at the end of the section, whichever comes first.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_reader import Cursor

# Range list entry kinds (DWARF 5, section 7.25, table 7.30)
DW_RLE_end_of_list, DW_RLE_base_addressx, DW_RLE_startx_endx, DW_RLE_startx_length = 0x00, 0x01, 0x02, 0x03
DW_RLE_offset_pair, DW_RLE_base_address, DW_RLE_start_end, DW_RLE_start_length = 0x04, 0x05, 0x06, 0x07
#: addresses are 64-bit: a range reaching past this comes from corrupt data (sums of offsets)
ADDRESS_LIMIT = 1 << 64
#: a list longer than this is corrupt (gcc's longest lists, for heavily inlined code, have a few dozen)
MAX_ENTRIES = 65536

Ranges = list[tuple[int, int]]


def read_rnglist(
    section: bytes, offset: int, base: int, address_size: int, address_at: Callable[[int], int]
) -> Ranges:
    """The DWARF 5 range list at ``offset`` of .debug_rnglists (section 2.17.3). ``base`` is the CU's base
    address; ``address_at`` maps a .debug_addr index to an address (the DW_RLE_*x entry kinds)."""
    cursor = Cursor(section, offset)
    found: Ranges = []
    for _ in range(MAX_ENTRIES):
        kind = cursor.u8()
        if kind == DW_RLE_end_of_list:
            return found
        if kind == DW_RLE_base_addressx:
            base = address_at(cursor.uleb())
        elif kind == DW_RLE_base_address:
            base = cursor.uint(address_size)
        elif kind == DW_RLE_offset_pair:
            start, end = cursor.uleb(), cursor.uleb()
            found.append((base + start, base + end))
        elif kind == DW_RLE_startx_endx:
            found.append((address_at(cursor.uleb()), address_at(cursor.uleb())))
        elif kind == DW_RLE_startx_length:
            start = address_at(cursor.uleb())
            found.append((start, start + cursor.uleb()))
        elif kind == DW_RLE_start_end:
            found.append((cursor.uint(address_size), cursor.uint(address_size)))
        elif kind == DW_RLE_start_length:
            start = cursor.uint(address_size)
            found.append((start, start + cursor.uleb()))
        else:
            raise BinaryError(f"unknown range list entry kind 0x{kind:x} at 0x{cursor.pos - 1:x}")
    raise BinaryError(f"range list at 0x{offset:x} has more than {MAX_ENTRIES} entries")


def read_ranges(section: bytes, offset: int, base: int, address_size: int) -> Ranges:
    """The DWARF 2-4 range list at ``offset`` of .debug_ranges (DWARF 4, section 2.17.3): (start, end)
    pairs relative to the base address, a pair with start = max address selects a new base, and (0, 0)
    ends the list."""
    cursor = Cursor(section, offset)
    max_address = (1 << (8 * address_size)) - 1
    found: Ranges = []
    for _ in range(MAX_ENTRIES):
        start, end = cursor.uint(address_size), cursor.uint(address_size)
        if start == 0 and end == 0:
            return found
        if start == max_address:
            base = end
        else:
            found.append((base + start, base + end))
    raise BinaryError(f"range list at 0x{offset:x} has more than {MAX_ENTRIES} entries")
