"""Where a function is declared: the file and line of DW_AT_decl_file and DW_AT_decl_line (DWARF 5, section
2.14), found on the DIE of a concrete instance or along its DW_AT_abstract_origin and DW_AT_specification
references, as ``function_names.py`` finds its name.

A frame's identity in outputs is its function, whichever of its lines was sampled; the declaration is what
stands for the whole function in them (speedscope's frame file and line, folded stacks' file). The line a
sample is at cannot: a function's lines come from several files where its body includes another
(CPython 3.12's ``_PyEval_EvalFrameDefault`` runs ``Python/generated_cases.c.h``, included in
``Python/ceval.c``, where it is declared).

The first DIE of the chain that has DW_AT_decl_file says it: a C++ member function's definition outside
its class, whose DW_AT_specification is the declaration in the class, carries the file and line of the
definition. A DW_AT_decl_file indexes the file table of the line program of the unit holding that DIE,
which for a reference across units (LTO builds, DW_FORM_ref_addr; Debian's python3.11) is another unit.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.symbolize.dwarf_constants import DW_AT_decl_file, DW_AT_decl_line
from profiler.symbolize.dwarf_dies import Die, UnitDies
from profiler.symbolize.function_names import origin_chain
from profiler.symbolize.unit_symbols import UnitSymbols

#: (file, line) of a declaration; either None where DWARF does not say
Declaration = tuple[str | None, int | None]


class Declarations:
    """Declarations of subprogram and inlined-subroutine DIEs, cached by DIE offset. ``unit_of`` returns
    the unit holding a .debug_info offset, for references into another unit; None if it cannot be read."""

    def __init__(self, unit_of: Callable[[int], UnitSymbols | None]) -> None:
        self._unit_of = unit_of
        self._found: dict[int, Declaration] = {}

    def of(self, unit: UnitSymbols, die: Die) -> Declaration:
        """Where the function ``die`` is an instance of is declared."""
        found = self._found.get(die.offset)
        if found is None:
            found = self._found[die.offset] = self._follow(unit, die)
        return found

    def _follow(self, unit: UnitSymbols, die: Die) -> Declaration:
        def dies_of(offset: int) -> UnitDies | None:
            holder = self._unit_of(offset)
            return holder.dies if holder is not None else None

        for dies, current in origin_chain(unit.dies, die, dies_of):
            index = dies.integer(current, DW_AT_decl_file)
            if index is not None:
                holder = unit if dies is unit.dies else self._unit_of(current.offset)
                lines = holder.lines if holder is not None else None
                line = dies.integer(current, DW_AT_decl_line)
                return (lines.file_name(index) or None if lines is not None else None), (line or None)
        return None, None
