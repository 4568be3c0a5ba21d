"""The name of a function from its DIE, following DW_AT_abstract_origin and DW_AT_specification.

A concrete out-of-line or inlined instance usually carries no name of its own: it points with
DW_AT_abstract_origin to the abstract instance (DWARF 5, section 3.3.8.1), which for a C++ member function
points with DW_AT_specification to the declaration inside its class (section 2.13.2), which finally holds
DW_AT_name and DW_AT_linkage_name. The linkage (mangled) name wins wherever it is found on the chain,
because only it carries namespaces, classes, template arguments and parameters; it is demangled. A plain
DW_AT_name is the fallback (C functions and ``main`` have no linkage name). This is binutils'
``find_abstract_instance`` order, so names match ``addr2line -f -C``. Whether the name was a linkage name
is reported too: binutils prefers the symbol table's name for an out-of-line function without one
(a C++ template instance with internal linkage has only ``__insertion_sort<...>`` in DWARF).
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.symbolize.demangle import demangle
from profiler.symbolize.dwarf_constants import (
    DW_AT_abstract_origin, DW_AT_linkage_name, DW_AT_MIPS_linkage_name, DW_AT_name, DW_AT_specification,
)  # fmt: skip
from profiler.symbolize.dwarf_dies import Die, UnitDies

#: a chain of origin/specification references longer than this is a loop in corrupt DWARF
#: (real chains are concrete -> abstract -> declaration: 3 DIEs)
MAX_HOPS = 8
_LINKAGE_ATTRIBUTES = (DW_AT_linkage_name, DW_AT_MIPS_linkage_name)
_REFERENCE_ATTRIBUTES = (DW_AT_abstract_origin, DW_AT_specification)


class FunctionNames:
    """Names of subprogram and inlined-subroutine DIEs, cached by DIE offset.

    ``unit_of`` returns the CU holding a .debug_info offset, for DW_FORM_ref_addr references into another
    CU (LTO builds make them); None if it cannot be read.
    """

    def __init__(self, unit_of: Callable[[int], UnitDies | None]) -> None:
        self._unit_of = unit_of
        self._names: dict[int, tuple[str | None, bool]] = {}

    def name_of(self, unit: UnitDies, die: Die) -> tuple[str | None, bool]:
        """(name, is a linkage name): the demangled linkage name, else the DW_AT_name, of the function
        ``die`` is an instance of."""
        if die.offset in self._names:
            return self._names[die.offset]
        plain: str | None = None
        linkage: str | None = None
        current_unit, current = unit, die
        for _ in range(MAX_HOPS):
            linkage = next(filter(None, (current_unit.text(current, a) for a in _LINKAGE_ATTRIBUTES)), None)
            if linkage:
                break
            plain = plain or current_unit.text(current, DW_AT_name)
            target = next(
                (t for a in _REFERENCE_ATTRIBUTES if (t := current_unit.reference(current, a)) is not None), None
            )
            if target is None:
                break
            if not current_unit.start <= target < current_unit.end:
                other = self._unit_of(target)
                if other is None:
                    break
                current_unit = other
            current = current_unit.die_at(target)
        found = (demangle(linkage), True) if linkage else (plain, False)
        self._names[die.offset] = found
        return found
