"""The inlined calls inside one concrete subprogram: which chain of DW_TAG_inlined_subroutine DIEs covers an
address, outermost first.

Each DW_TAG_inlined_subroutine (DWARF 5, section 3.3.8.2) is a concrete inlined instance: its address ranges
are the code the inlined function became, DW_AT_abstract_origin names the function, and DW_AT_call_file /
DW_AT_call_line say where in the *enclosing* function the call was. Instances nest, directly or through
DW_TAG_lexical_block scopes, so the subtree of a subprogram is walked once, entering only those scopes, and
flattened into numpy columns (low, high, site) plus a parent link per site. A lookup takes the deepest site
whose range contains the address and follows the parent links, the way binutils' addr2line follows its
``caller_func`` links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.symbolize.dwarf_constants import (
    DW_AT_call_file,
    DW_AT_call_line,
    DW_TAG_catch_block,
    DW_TAG_inlined_subroutine,
    DW_TAG_lexical_block,
    DW_TAG_try_block,
)  # fmt: skip
from profiler.symbolize.dwarf_dies import Die, UnitDies

#: scopes that may contain inlined instances inside a subprogram (DWARF 5, sections 3.3.8.2, 3.5, 3.6)
_SCOPES = frozenset((DW_TAG_inlined_subroutine, DW_TAG_lexical_block, DW_TAG_try_block, DW_TAG_catch_block))
#: more inlined instances than this in one subprogram is treated as corrupt (CPython 3.12's
#: _PyEval_EvalFrameDefault, the largest seen, has a few thousand)
MAX_SITES = 500_000


@dataclass(frozen=True)
class InlineSite:
    """One DW_TAG_inlined_subroutine DIE: where its function is described and where it was called from."""

    die_offset: int
    call_file: int | None  #: DW_AT_call_file: a file index of the CU's line table
    call_line: int | None  #: DW_AT_call_line
    parent: int  #: index of the enclosing site, -1 when the enclosing function is the subprogram itself
    depth: int


class InlineTree:
    """Every inlined instance in one subprogram's subtree, with their address ranges."""

    def __init__(self, unit: UnitDies, subprogram: Die) -> None:
        self.sites: list[InlineSite] = []
        site_of: dict[int, int] = {subprogram.offset: -1}  # scope DIE offset -> enclosing site index
        lows: list[int] = []
        highs: list[int] = []
        owners: list[int] = []
        for die, parent in unit.scan(subprogram, _SCOPES, _SCOPES):
            enclosing = site_of.get(parent, -1)
            if die.tag != DW_TAG_inlined_subroutine:
                site_of[die.offset] = enclosing
                continue
            index = len(self.sites)
            if index >= MAX_SITES:
                break
            depth = self.sites[enclosing].depth + 1 if enclosing >= 0 else 1
            self.sites.append(
                InlineSite(
                    die.offset,
                    unit.integer(die, DW_AT_call_file),
                    unit.integer(die, DW_AT_call_line),
                    enclosing,
                    depth,
                )
            )
            site_of[die.offset] = index
            for lo, hi in unit.ranges(die):
                lows.append(lo)
                highs.append(hi)
                owners.append(index)
        self._lows = np.array(lows, dtype=np.uint64)
        self._highs = np.array(highs, dtype=np.uint64)
        self._owners = np.array(owners, dtype=np.int64)
        self._depths = np.array([self.sites[i].depth for i in owners], dtype=np.int64)

    def chain(self, svma: int) -> list[InlineSite]:
        """The inlined instances covering ``svma``, outermost first ([] when none does)."""
        if not len(self._owners):
            return []
        at = np.uint64(svma)
        hits = np.flatnonzero((self._lows <= at) & (at < self._highs))
        if not len(hits):
            return []
        deepest = int(self._owners[hits[int(np.argmax(self._depths[hits]))]])
        found: list[InlineSite] = []
        index = deepest
        while index >= 0 and len(found) < len(self.sites):  # parents precede children: a chain ends
            site = self.sites[index]
            found.append(site)
            index = site.parent
        found.reverse()
        return found
