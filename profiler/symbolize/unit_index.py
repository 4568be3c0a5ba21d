"""Address -> unit, and .debug_info offset -> unit: ``.debug_aranges`` first, one scan of the rest.

``.debug_aranges`` maps address ranges to unit offsets without touching ``.debug_info``, so a lookup in a
14 MiB ``.debug_info`` parses one unit. Producers may omit it, or omit some units from it (clang emits none
by default; hand-written assembly units are sometimes missing). So the first address that aranges do not
cover triggers one scan of all unit headers; for each code unit absent from aranges, the ranges of its top
DIE (DW_AT_low_pc/high_pc or DW_AT_ranges) go into a second table. Both tables are sorted numpy columns.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_constants import CODE_UNIT_TYPES
from profiler.symbolize.dwarf_dies import UnitDies
from profiler.symbolize.dwarf_sections import DebugSections
from profiler.symbolize.dwarf_units import UnitHeader, iter_unit_headers, read_aranges
from profiler.symbolize.range_lists import ADDRESS_LIMIT

#: how many earlier-starting ranges a lookup checks when the nearest one does not contain the address
#: (ranges overlap only when they nest, e.g. a GNU C nested function inside its parent, a few deep)
OVERLAP_LOOKBACK = 8


class RangeColumns:
    """Sorted, non-empty [begin, end) ranges, each tagged with a value (a unit or DIE offset)."""

    def __init__(self, triples: list[tuple[int, int, int]]) -> None:
        triples = sorted(t for t in triples if t[0] < t[1] <= ADDRESS_LIMIT)
        self.begins = np.array([t[0] for t in triples], dtype=np.uint64)
        self.ends = np.array([t[1] for t in triples], dtype=np.uint64)
        self.values = [t[2] for t in triples]
        self.value_set = frozenset(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def value_at(self, svma: int) -> int | None:
        """The value of the latest-starting range containing ``svma``: the innermost one when they nest."""
        i = int(np.searchsorted(self.begins, np.uint64(svma), side="right")) - 1
        for j in range(i, max(i - OVERLAP_LOOKBACK, -1), -1):
            if svma < int(self.ends[j]):
                return self.values[j]
        return None


class UnitIndex:
    """Finds units by address and by DIE offset; ``note`` is told which parts could not be read.

    ``open_unit`` turns a header into the unit's DIEs (the resolver's cached constructor), so the top DIEs
    decoded by the scan are reused when an address later falls in the unit.
    """

    def __init__(
        self, sections: DebugSections, open_unit: Callable[[UnitHeader], UnitDies], note: Callable[[str], None]
    ) -> None:
        self._sections = sections
        self._open_unit = open_unit
        self._note = note
        triples: list[tuple[int, int, int]] = []
        if sections.aranges is not None:
            try:
                triples = read_aranges(sections.aranges)
            except BinaryError as e:
                self._note(f".debug_aranges unreadable, scanning units instead ({e})")
        self.aranges = RangeColumns(triples)
        self._headers: list[UnitHeader] | None = None
        self._header_offsets: list[int] = []
        self._scanned: RangeColumns | None = None

    def unit_at(self, svma: int) -> int | None:
        """The .debug_info offset of the unit whose code contains ``svma``, or None."""
        found = self.aranges.value_at(svma)
        if found is None:
            found = self._scan().value_at(svma)
        return found

    def headers(self) -> list[UnitHeader]:
        """All unit headers, read once; the readable prefix if one is corrupt."""
        if self._headers is None:
            self._headers = []
            try:
                self._headers.extend(iter_unit_headers(self._sections.info))
            except BinaryError as e:
                self._note(f"unit headers unreadable after {len(self._headers)} units ({e})")
            self._header_offsets = [h.offset for h in self._headers]
        return self._headers

    def header_containing(self, offset: int) -> UnitHeader | None:
        """The unit holding .debug_info offset ``offset`` (for DW_FORM_ref_addr), or None."""
        headers = self.headers()
        i = bisect.bisect_right(self._header_offsets, offset) - 1
        return headers[i] if i >= 0 and offset < headers[i].end else None

    def _scan(self) -> RangeColumns:
        if self._scanned is None:
            triples: list[tuple[int, int, int]] = []
            for header in self.headers():
                if header.offset in self.aranges.value_set or header.unit_type not in CODE_UNIT_TYPES:
                    continue
                try:
                    unit = self._open_unit(header)
                    triples += [(lo, hi, header.offset) for lo, hi in unit.ranges(unit.top)]
                except BinaryError as e:
                    self._note(f"unit at 0x{header.offset:x}: top DIE unreadable ({e})")
            self._scanned = RangeColumns(triples)
        return self._scanned
