"""The DIEs of one unit, decoded one at a time on demand, and walked without trusting the file.

Why not pyelftools for this: it decodes each DIE through ``construct`` at about 25 µs, and a query steps
over the ~2,000 file-scope DIEs of a typical libpython unit before it finds its function. A first version
on pyelftools took 18 s for 500 libpython3.12 addresses (111 units); this decoder (compiled
abbreviations, DIEs of fixed-size forms stepped over undecoded, strings read only when a name is wanted)
and ``line_table``'s take 1.8 s. pyelftools' tree iteration also follows DW_AT_sibling wherever it
points, so a sibling pointing backwards loops forever.

Here every step moves strictly forward inside the unit (a DIE is at least one byte, its abbreviation
code), a sibling is used only when it points past its DIE, and nesting is capped, so a corrupt unit ends
in a BinaryError, never a hang. Sibling links (gcc emits them on every DIE with children) skip subtrees.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from profiler.errors import BinaryError
from profiler.symbolize import dwarf_forms as F
from profiler.symbolize.dwarf_constants import (
    DW_AT_addr_base,
    DW_AT_high_pc,
    DW_AT_low_pc,
    DW_AT_name,
    DW_AT_ranges,
    DW_AT_rnglists_base,
    DW_AT_sibling,
    DW_AT_str_offsets_base,
    DW_TAG_class_type,
    DW_TAG_structure_type,
    DW_TAG_union_type,
)  # fmt: skip
from profiler.symbolize.dwarf_reader import c_string, read_uleb
from profiler.symbolize.dwarf_sections import DebugSections
from profiler.symbolize.dwarf_units import UnitHeader
from profiler.symbolize.range_lists import ADDRESS_LIMIT, Ranges, read_ranges, read_rnglist

#: nesting deeper than this is treated as corrupt (real C++/Rust code nests scopes a few dozen deep)
MAX_DEPTH = 256
#: tags whose unnamed instances ``ancestors`` numbers
_NUMBERED = frozenset((DW_TAG_class_type, DW_TAG_structure_type, DW_TAG_union_type))


@dataclass(slots=True)
class Die:
    """One debugging information entry; ``tag`` 0 is the null entry that ends a list of children."""

    offset: int
    size: int
    tag: int
    has_children: bool
    attrs: dict[int, tuple[int, int]]  #: attribute -> (form, raw value)


class UnitDies:
    """The DIEs of one unit, each decoded at most once, at offsets checked to lie inside the unit."""

    def __init__(self, sections: DebugSections, header: UnitHeader, abbrevs: dict[int, F.Abbrev]) -> None:
        self.sections = sections
        self.header = header
        self.fmt = header.fmt
        self.start, self.end = header.die_offset, header.end
        self._data = sections.info
        self._abbrevs = abbrevs
        self._dies: dict[int, Die] = {}
        self._ends: dict[int, int] = {}  # DIE offset -> offset just past its subtree
        self.top = self.die_at(self.start)
        # the unit header's size is the default base of each offset table (DWARF 5, sections 7.26-7.28)
        table_header = 8 if self.fmt.offset_size == 4 else 16
        self._str_offsets_base = self.integer(self.top, DW_AT_str_offsets_base) or table_header
        self._addr_base = self.integer(self.top, DW_AT_addr_base) or table_header
        self._rnglists_base = self.integer(self.top, DW_AT_rnglists_base) or table_header + 4
        #: base address of range lists (DWARF 5, section 3.1.1): the unit's DW_AT_low_pc, else 0
        self.base_address = self.address(self.top, DW_AT_low_pc) or 0

    # --- decoding -------------------------------------------------------------------------------------

    def die_at(self, offset: int) -> Die:
        die = self._dies.get(offset)
        if die is not None:
            return die
        data, end, fmt = self._data, self.end, self.fmt
        if not self.start <= offset < end:
            raise BinaryError(f"DIE offset 0x{offset:x} outside its unit [0x{self.start:x}, 0x{end:x})")
        code, i = read_uleb(data, offset, end)
        if code == 0:
            die = Die(offset, i - offset, 0, False, {})
        else:
            abbrev = self._abbrevs.get(code)
            if abbrev is None:
                raise BinaryError(f"DIE at 0x{offset:x}: unknown abbreviation code {code}")
            attrs: dict[int, tuple[int, int]] = {}
            for attribute, form, size, constant in abbrev.specs:
                if size > 0:
                    attrs[attribute] = (form, int.from_bytes(data[i : i + size], "little"))
                    i += size
                elif size == 0:
                    attrs[attribute] = (form, constant)
                else:
                    value, i = F.read_variable(data, i, end, form, fmt)
                    attrs[attribute] = (form, value)
            if i > end:
                raise BinaryError(f"DIE at 0x{offset:x} runs past the end of its unit")
            die = Die(offset, i - offset, abbrev.tag, abbrev.has_children, attrs)
        self._dies[offset] = die
        return die

    # --- navigation -----------------------------------------------------------------------------------

    def _step(self, offset: int) -> tuple[int, bool, int, int]:
        """(tag, has_children, offset past the DIE itself, offset past its subtree or 0 if unknown) of
        the DIE at ``offset``, without decoding it when its abbreviation has only fixed-size forms."""
        die = self._dies.get(offset)
        if die is None:
            if not self.start <= offset < self.end:
                raise BinaryError(f"DIE offset 0x{offset:x} outside its unit [0x{self.start:x}, 0x{self.end:x})")
            code, i = read_uleb(self._data, offset, self.end)
            abbrev = self._abbrevs.get(code)
            if code and abbrev is not None and abbrev.size >= 0:
                after = i + abbrev.size
                if after > self.end:
                    raise BinaryError(f"DIE at 0x{offset:x} runs past the end of its unit")
                if not abbrev.has_children:
                    return abbrev.tag, False, after, after
                skip = self._ends.get(offset, 0)
                if not skip and abbrev.sibling_at >= 0:
                    at = i + abbrev.sibling_at
                    target = self.header.offset + int.from_bytes(self._data[at : at + abbrev.sibling_size], "little")
                    skip = target if after <= target < self.end else 0
                return abbrev.tag, True, after, skip
            die = self.die_at(offset)
        after = die.offset + die.size
        if not die.has_children:
            return die.tag, False, after, after
        return die.tag, True, after, self._ends.get(offset) or self._sibling(die)

    def end_of(self, offset: int) -> int:
        """The offset just past the DIE at ``offset`` and its whole subtree (always greater than it)."""
        _tag, has_children, after, skip = self._step(offset)
        if not has_children or skip:
            return skip or after
        depth, i = 1, after
        while depth:  # each step moves forward by at least one byte, and _step stops at the unit's end
            tag, has_children, after, skip = self._step(i)
            if tag == 0:
                depth, i = depth - 1, after
            elif has_children and skip:
                i = skip
            else:
                i = after
                depth += has_children
                if depth > MAX_DEPTH:
                    raise BinaryError(f"DIEs nested deeper than {MAX_DEPTH} at 0x{i:x}")
        self._ends[offset] = i
        return i

    def _sibling(self, die: Die) -> int:
        """DW_AT_sibling (DWARF 5, section 2.4) when it points forward inside the unit, else 0."""
        target = self.reference(die, DW_AT_sibling)
        return target if target is not None and die.offset + die.size <= target < self.end else 0

    def scan(self, root: Die, descend: frozenset[int], want: frozenset[int]) -> Iterator[tuple[Die, int]]:
        """(DIE, parent offset) for the DIEs of ``root``'s subtree whose tag is in ``want``, in pre-order,
        entering only DIEs whose tag is in ``descend``; the others are stepped over undecoded."""
        if not root.has_children:
            return
        parents = [root.offset]
        offset = root.offset + root.size
        while parents:
            tag, has_children, after, skip = self._step(offset)
            if tag == 0:
                self._ends[parents.pop()] = offset = after
                continue
            if tag in want:
                yield self.die_at(offset), parents[-1]
            if not has_children:
                offset = after
            elif tag in descend:
                if len(parents) >= MAX_DEPTH:
                    raise BinaryError(f"DIEs nested deeper than {MAX_DEPTH} at 0x{offset:x}")
                parents.append(offset)
                offset = after
            else:
                offset = skip or self.end_of(offset)

    def ancestors(self, offset: int) -> list[tuple[Die, int]]:
        """The DIEs whose subtrees hold the DIE at ``offset``, outermost first (the unit's own DIE left
        out), each with the count of its earlier siblings of its own tag that have no DW_AT_name (how
        C++ numbers its unnamed classes, lambdas: ``{lambda#2}``). Found by stepping over every subtree
        that ends before ``offset``, so the cost is the siblings along one path, not the unit."""
        path: list[tuple[Die, int]] = []
        parent = self.top
        while parent.offset != offset and parent.has_children:
            child = parent.offset + parent.size
            unnamed: dict[int, int] = {}
            while True:
                tag, has_children, after, skip = self._step(child)
                if tag == 0:
                    return path  # not below ``parent``: corrupt references
                end = (skip or self.end_of(child)) if has_children else after
                if child <= offset < end:
                    break
                if has_children and tag in _NUMBERED and self.text(self.die_at(child), DW_AT_name) is None:
                    unnamed[tag] = unnamed.get(tag, 0) + 1
                child = end
            if child == offset:
                return path
            parent = self.die_at(child)
            path.append((parent, unnamed.get(parent.tag, 0)))
            if len(path) > MAX_DEPTH:
                raise BinaryError(f"DIEs nested deeper than {MAX_DEPTH} at 0x{offset:x}")
        return path

    # --- attribute values -----------------------------------------------------------------------------

    def reference(self, die: Die, attribute: int) -> int | None:
        """The .debug_info offset a reference attribute points to; None if absent or pointing outside this
        file (DW_FORM_ref_sig8 type units, DW_FORM_GNU_ref_alt/ref_sup* supplementary files)."""
        form, value = die.attrs.get(attribute, (0, 0))
        if form in F.UNIT_REF_FORMS:
            return self.header.offset + value
        return value if form == F.DW_FORM_ref_addr else None

    def integer(self, die: Die, attribute: int) -> int | None:
        """A constant, flag or offset attribute's value (DW_FORM_sdata keeps its sign)."""
        found = die.attrs.get(attribute)
        return found[1] if found is not None else None

    def text(self, die: Die, attribute: int) -> str | None:
        """A string attribute: inline, or in .debug_str / .debug_line_str (DWARF 5, section 7.26)."""
        form, value = die.attrs.get(attribute, (0, 0))
        return self.form_text(form, value)

    def form_text(self, form: int, value: int) -> str | None:
        sections = self.sections
        if form == F.DW_FORM_strp:
            raw = c_string(sections.strings, value)
        elif form == F.DW_FORM_line_strp:
            raw = c_string(sections.line_strings, value)
        elif form == F.DW_FORM_string:
            raw = c_string(sections.info, value)
        elif form in F.STRX_FORMS or form == F.DW_FORM_GNU_str_index:
            size = self.fmt.offset_size
            at = self._str_offsets_base + value * size
            table = sections.string_offsets
            raw = c_string(sections.strings, int.from_bytes(table[at : at + size], "little")) if table else None
        else:
            raw = None  # DW_FORM_GNU_strp_alt / strp_sup name strings in a supplementary file
        return raw.decode("utf-8", "replace") if raw is not None else None

    def address(self, die: Die, attribute: int) -> int | None:
        form, value = die.attrs.get(attribute, (0, 0))
        if form == F.DW_FORM_addr:
            return value
        if form in F.ADDRX_FORMS or form == F.DW_FORM_GNU_addr_index:
            return self.indexed_address(value)
        return None

    def indexed_address(self, index: int) -> int:
        """Entry ``index`` of this unit's .debug_addr table (DWARF 5, section 7.27)."""
        size = self.fmt.address_size
        at = self._addr_base + index * size
        table = self.sections.addr
        if table is None or not 0 <= at <= len(table) - size:
            raise BinaryError(f".debug_addr index {index} out of range")
        return int.from_bytes(table[at : at + size], "little")

    def ranges(self, die: Die) -> Ranges:
        """The address ranges of a DIE (DWARF 5, section 2.17), empty ones dropped."""
        low = self.address(die, DW_AT_low_pc)
        high = die.attrs.get(DW_AT_high_pc)
        if low is not None and high is not None:
            form, value = high
            end = low + value if form in F.CONSTANT_FORMS else self.address(die, DW_AT_high_pc) or 0
            return [(low, end)] if low < end <= ADDRESS_LIMIT else []
        listed = die.attrs.get(DW_AT_ranges)
        if listed is None:
            return []
        form, value = listed
        sections, size = self.sections, self.fmt.address_size
        if self.fmt.version < 5:
            found = read_ranges(sections.ranges, value, self.base_address, size) if sections.ranges else []
        elif sections.rnglists is None:
            found = []
        else:
            if form == F.DW_FORM_rnglistx:  # an index into the offsets after the list table header (7.28)
                at, width = self._rnglists_base + value * self.fmt.offset_size, self.fmt.offset_size
                value = self._rnglists_base + int.from_bytes(sections.rnglists[at : at + width], "little")
            found = read_rnglist(sections.rnglists, value, self.base_address, size, self.indexed_address)
        return [(lo, hi) for lo, hi in found if lo < hi <= ADDRESS_LIMIT]
