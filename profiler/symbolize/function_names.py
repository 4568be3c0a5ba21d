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

In a C++ unit, a name without a linkage name (gcc emits none for functions only ever inlined, and for
lambdas' ``operator()``) is qualified with the scopes its declaration sits in, as gdb does: namespaces,
classes, the function a local class is defined in, ``{lambda#N}`` for the N-th unnamed class of a scope.
``operator()`` alone named the comparator lambda, a thread's lambda and ``std::thread::_Invoker``'s as one
function, and ``sort<...>`` lost its ``std::``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from profiler.symbolize.demangle import demangle
from profiler.symbolize.dwarf_constants import (
    DW_LANG_CPLUSPLUS,
    DW_AT_abstract_origin,
    DW_AT_language,
    DW_AT_linkage_name,
    DW_AT_MIPS_linkage_name,
    DW_AT_name,
    DW_AT_specification,
    DW_TAG_class_type,
    DW_TAG_interface_type,
    DW_TAG_namespace,
    DW_TAG_structure_type,
    DW_TAG_subprogram,
    DW_TAG_union_type,
)  # fmt: skip
from profiler.symbolize.dwarf_dies import Die, UnitDies

#: a chain of origin/specification references longer than this is a loop in corrupt DWARF
#: (real chains are concrete -> abstract -> declaration: 3 DIEs)
MAX_HOPS = 8
_LINKAGE_ATTRIBUTES = (DW_AT_linkage_name, DW_AT_MIPS_linkage_name)
_REFERENCE_ATTRIBUTES = (DW_AT_abstract_origin, DW_AT_specification)
_TYPES = frozenset((DW_TAG_class_type, DW_TAG_structure_type, DW_TAG_union_type, DW_TAG_interface_type))


def origin_chain(
    unit: UnitDies, die: Die, unit_of: Callable[[int], UnitDies | None]
) -> Iterator[tuple[UnitDies, Die]]:
    """``die``, then the DIEs its DW_AT_abstract_origin or DW_AT_specification leads to, each with its unit
    (``unit_of``: the unit holding a .debug_info offset, for a reference into another), ``MAX_HOPS`` at most:
    where a function's name and declaration are to be found (DWARF 5, sections 2.13.2 and 3.3.8)."""
    current_unit, current = unit, die
    for hop in range(MAX_HOPS):
        yield current_unit, current
        if hop == MAX_HOPS - 1:
            return
        target = next((t for a in _REFERENCE_ATTRIBUTES if (t := current_unit.reference(current, a)) is not None),
                      None)  # fmt: skip
        if target is None:
            return
        if not current_unit.start <= target < current_unit.end:
            other = unit_of(target)
            if other is None:
                return
            current_unit = other
        current = current_unit.die_at(target)


class FunctionNames:
    """Names of subprogram and inlined-subroutine DIEs, cached by DIE offset.

    ``unit_of`` returns the CU holding a .debug_info offset, for DW_FORM_ref_addr references into another
    CU (LTO builds make them); None if it cannot be read.
    """

    def __init__(self, unit_of: Callable[[int], UnitDies | None]) -> None:
        self._unit_of = unit_of
        self._names: dict[int, tuple[str | None, bool]] = {}
        self._cplusplus: dict[int, bool] = {}  #: unit offset -> it is a C++ unit

    def name_of(self, unit: UnitDies, die: Die) -> tuple[str | None, bool]:
        """(name, is a linkage name): the demangled linkage name, else the DW_AT_name, of the function
        ``die`` is an instance of."""
        if die.offset in self._names:
            return self._names[die.offset]
        plain: str | None = None
        linkage: str | None = None
        current_unit, current = unit, die
        for current_unit, current in origin_chain(unit, die, self._unit_of):
            linkage = next(filter(None, (current_unit.text(current, a) for a in _LINKAGE_ATTRIBUTES)), None)
            if linkage:
                break
            plain = plain or current_unit.text(current, DW_AT_name)
        if linkage:
            found: tuple[str | None, bool] = (demangle(linkage), True)
        elif plain and self._is_cplusplus(current_unit):
            found = (self._qualified(current_unit, current, plain), False)
        else:
            found = (plain, False)
        self._names[die.offset] = found
        return found

    def _is_cplusplus(self, unit: UnitDies) -> bool:
        known = self._cplusplus.get(unit.start)
        if known is None:
            known = self._cplusplus[unit.start] = unit.integer(unit.top, DW_AT_language) in DW_LANG_CPLUSPLUS
        return known

    def _qualified(self, unit: UnitDies, declaration: Die, name: str) -> str:
        """``name`` prefixed with the scopes ``declaration`` sits in (``ns::Box<double>::compute``)."""
        scopes = []
        for scope, earlier_unnamed in unit.ancestors(declaration.offset):
            if scope.tag == DW_TAG_namespace:
                scopes.append(unit.text(scope, DW_AT_name) or "(anonymous namespace)")
            elif scope.tag in _TYPES:
                label = unit.text(scope, DW_AT_name)
                if label is None:  # gcc's lambda closure types are unnamed structures (or classes)
                    kind = "unnamed type" if scope.tag == DW_TAG_union_type else "lambda"
                    label = f"{{{kind}#{earlier_unnamed + 1}}}"
                scopes.append(label)
            elif scope.tag == DW_TAG_subprogram:  # a local class: qualified by its function
                scopes = [self.name_of(unit, scope)[0] or "?"]
        return "::".join([*scopes, name])
