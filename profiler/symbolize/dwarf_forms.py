"""Attribute forms (DWARF 5, section 7.5.6) and abbreviation tables (section 7.5.3), compiled for speed.

A DIE is an abbreviation code followed by one value per (attribute, form) pair its abbreviation lists.
Each pair is compiled once per abbreviation table and unit format into (attribute, form, size, constant):
``size`` is the value's byte count when the form has a fixed size in that format, -1 when it is variable
(LEB128, strings, blocks); ``constant`` is the value of DW_FORM_implicit_const / DW_FORM_flag_present,
which occupy no bytes in the DIE. Decoding a DIE is then a loop of ``int.from_bytes`` slices.

Values are kept as integers: for string and block forms, the offset where the bytes start; strings are
only looked up when a name is actually wanted.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_constants import DW_AT_sibling
from profiler.symbolize.dwarf_reader import Cursor, read_sleb, read_uleb

# Attribute form encodings (DWARF 5, section 7.5.6, table 7.6; GNU extensions from binutils' dwarf2.def)
DW_FORM_addr, DW_FORM_block2, DW_FORM_block4 = 0x01, 0x03, 0x04
DW_FORM_data2, DW_FORM_data4, DW_FORM_data8, DW_FORM_string = 0x05, 0x06, 0x07, 0x08
DW_FORM_block, DW_FORM_block1, DW_FORM_data1, DW_FORM_flag = 0x09, 0x0A, 0x0B, 0x0C
DW_FORM_sdata, DW_FORM_strp, DW_FORM_udata, DW_FORM_ref_addr = 0x0D, 0x0E, 0x0F, 0x10
DW_FORM_ref1, DW_FORM_ref2, DW_FORM_ref4, DW_FORM_ref8 = 0x11, 0x12, 0x13, 0x14
DW_FORM_ref_udata, DW_FORM_indirect, DW_FORM_sec_offset, DW_FORM_exprloc = 0x15, 0x16, 0x17, 0x18
DW_FORM_flag_present, DW_FORM_strx, DW_FORM_addrx, DW_FORM_ref_sup4 = 0x19, 0x1A, 0x1B, 0x1C
DW_FORM_strp_sup, DW_FORM_data16, DW_FORM_line_strp, DW_FORM_ref_sig8 = 0x1D, 0x1E, 0x1F, 0x20
DW_FORM_implicit_const, DW_FORM_loclistx, DW_FORM_rnglistx, DW_FORM_ref_sup8 = 0x21, 0x22, 0x23, 0x24
DW_FORM_strx1, DW_FORM_strx2, DW_FORM_strx3, DW_FORM_strx4 = 0x25, 0x26, 0x27, 0x28
DW_FORM_addrx1, DW_FORM_addrx2, DW_FORM_addrx3, DW_FORM_addrx4 = 0x29, 0x2A, 0x2B, 0x2C
DW_FORM_GNU_addr_index, DW_FORM_GNU_str_index = 0x1F01, 0x1F02
DW_FORM_GNU_ref_alt, DW_FORM_GNU_strp_alt = 0x1F20, 0x1F21

#: forms of the "constant" class (section 7.5.5): DW_AT_high_pc in one is an offset from DW_AT_low_pc
CONSTANT_FORMS = frozenset((
    DW_FORM_data1, DW_FORM_data2, DW_FORM_data4, DW_FORM_data8, DW_FORM_udata, DW_FORM_sdata,
    DW_FORM_implicit_const,
))  # fmt: skip
#: references relative to the start of the unit (section 7.5.5, "reference", first kind)
UNIT_REF_FORMS = frozenset((DW_FORM_ref1, DW_FORM_ref2, DW_FORM_ref4, DW_FORM_ref8, DW_FORM_ref_udata))
STRX_FORMS = frozenset((DW_FORM_strx, DW_FORM_strx1, DW_FORM_strx2, DW_FORM_strx3, DW_FORM_strx4))
ADDRX_FORMS = frozenset((DW_FORM_addrx, DW_FORM_addrx1, DW_FORM_addrx2, DW_FORM_addrx3, DW_FORM_addrx4))

_FIXED = {
    DW_FORM_data1: 1, DW_FORM_ref1: 1, DW_FORM_flag: 1, DW_FORM_strx1: 1, DW_FORM_addrx1: 1,
    DW_FORM_data2: 2, DW_FORM_ref2: 2, DW_FORM_strx2: 2, DW_FORM_addrx2: 2,
    DW_FORM_strx3: 3, DW_FORM_addrx3: 3,
    DW_FORM_data4: 4, DW_FORM_ref4: 4, DW_FORM_strx4: 4, DW_FORM_addrx4: 4, DW_FORM_ref_sup4: 4,
    DW_FORM_data8: 8, DW_FORM_ref8: 8, DW_FORM_ref_sig8: 8, DW_FORM_ref_sup8: 8,
    DW_FORM_data16: 16, DW_FORM_flag_present: 0, DW_FORM_implicit_const: 0,
}  # fmt: skip
#: forms one offset wide (4 bytes in 32-bit DWARF, 8 in 64-bit; section 7.4)
_OFFSET_SIZED = frozenset((
    DW_FORM_strp, DW_FORM_line_strp, DW_FORM_sec_offset, DW_FORM_strp_sup, DW_FORM_GNU_ref_alt,
    DW_FORM_GNU_strp_alt,
))  # fmt: skip
_ULEB_FORMS = frozenset((
    DW_FORM_udata, DW_FORM_ref_udata, DW_FORM_strx, DW_FORM_addrx, DW_FORM_loclistx, DW_FORM_rnglistx,
    DW_FORM_GNU_addr_index, DW_FORM_GNU_str_index,
))  # fmt: skip
#: block forms: their length prefix's size in bytes, 0 for a ULEB128 length
_BLOCKS = {DW_FORM_block1: 1, DW_FORM_block2: 2, DW_FORM_block4: 4, DW_FORM_block: 0, DW_FORM_exprloc: 0}
#: an abbreviation table with more entries, or an entry with more attributes, is corrupt
MAX_ABBREVS = 1_000_000
MAX_ATTRIBUTES = 256

Spec = tuple[int, int, int, int]  # (attribute, form, fixed size or -1, implicit constant)


@dataclass(frozen=True)
class UnitFormat:
    """What form sizes depend on: the unit's DWARF version, offset size (4 or 8) and address size."""

    version: int
    offset_size: int
    address_size: int

    def fixed_size(self, form: int) -> int:
        """The byte size of a value of ``form``, -1 if it varies (section 7.5.6)."""
        if form in _FIXED:
            return _FIXED[form]
        if form in _OFFSET_SIZED:
            return self.offset_size
        if form == DW_FORM_addr:
            return self.address_size
        if form == DW_FORM_ref_addr:  # address-sized in DWARF 2, offset-sized since DWARF 3 (section 7.5.5)
            return self.address_size if self.version <= 2 else self.offset_size
        return -1


@dataclass(frozen=True)
class Abbrev:
    """A compiled abbreviation. ``size`` is the byte size of a DIE's attribute values when every form is
    fixed-size in the unit's format, else -1; ``sibling_at`` is where the DW_AT_sibling value starts within
    them when every form before it is fixed-size, else -1. Both let a walk step over a DIE it does not need
    without decoding it."""

    tag: int
    has_children: bool
    specs: tuple[Spec, ...]
    size: int = -1
    sibling_at: int = -1
    sibling_size: int = 0


def _compile(tag: int, has_children: bool, specs: list[Spec]) -> Abbrev:
    size, sibling_at, sibling_size = 0, -1, 0
    for attribute, form, fixed, _constant in specs:
        if attribute == DW_AT_sibling and form in UNIT_REF_FORMS and fixed > 0 and size >= 0:
            sibling_at, sibling_size = size, fixed
        size = size + fixed if fixed >= 0 and size >= 0 else -1
    return Abbrev(tag, has_children, tuple(specs), size, sibling_at, sibling_size)


def parse_abbrevs(section: bytes, offset: int, fmt: UnitFormat) -> dict[int, Abbrev]:
    """The abbreviation table at ``offset`` of .debug_abbrev (section 7.5.3), compiled for ``fmt``."""
    cursor = Cursor(section, offset)
    table: dict[int, Abbrev] = {}
    for _ in range(MAX_ABBREVS):
        code = cursor.uleb()
        if code == 0:
            return table
        tag, has_children = cursor.uleb(), cursor.u8() != 0
        specs: list[Spec] = []
        for _ in range(MAX_ATTRIBUTES + 1):
            attribute, form = cursor.uleb(), cursor.uleb()
            if attribute == 0 and form == 0:
                break
            constant = cursor.sleb() if form == DW_FORM_implicit_const else 1
            specs.append((attribute, form, fmt.fixed_size(form), constant))
        else:
            raise BinaryError(f"abbreviation {code} at 0x{offset:x}: more than {MAX_ATTRIBUTES} attributes")
        table[code] = _compile(tag, has_children, specs)
    raise BinaryError(f"abbreviation table at 0x{offset:x}: more than {MAX_ABBREVS} entries")


def read_variable(data: bytes, i: int, end: int, form: int, fmt: UnitFormat) -> tuple[int, int]:
    """A value of a variable-size form at ``i``: (value, next offset). Strings and blocks give the
    offset of their bytes. DW_FORM_indirect (its form is a ULEB128 before the value) is followed once."""
    if form in _ULEB_FORMS:
        return read_uleb(data, i, end)
    if form == DW_FORM_sdata:
        return read_sleb(data, i, end)
    if form == DW_FORM_string:
        nul = data.find(b"\0", i, end)
        if nul < 0:
            raise BinaryError(f"unterminated DW_FORM_string at 0x{i:x}")
        return i, nul + 1
    if form in _BLOCKS:
        width = _BLOCKS[form]
        if width:
            length, start = int.from_bytes(data[i : i + width], "little"), i + width
        else:
            length, start = read_uleb(data, i, end)
        if start + length > end:
            raise BinaryError(f"block at 0x{i:x} runs past its unit")
        return start, start + length
    if form == DW_FORM_indirect:
        actual, i = read_uleb(data, i, end)
        if actual == DW_FORM_indirect:
            raise BinaryError(f"DW_FORM_indirect of DW_FORM_indirect at 0x{i:x}")
        size = fmt.fixed_size(actual)
        if size >= 0:
            return int.from_bytes(data[i : i + size], "little"), i + size
        return read_variable(data, i, end, actual, fmt)
    raise BinaryError(f"unknown attribute form 0x{form:x} at 0x{i:x}")
