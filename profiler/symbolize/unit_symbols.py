"""What one CU knows about its code: its line table, its concrete subprograms, their inlined calls.

Each part is built on first need and kept: a CU's line table when the first address in it is resolved, the
list of its concrete subprograms (DW_TAG_subprogram DIEs with code) from a walk of the scopes that can hold
them, and the inline tree of one subprogram when an address inside it is resolved. A part that is corrupt
is recorded in ``notes`` and left out, so the rest of the CU still serves: a broken line table leaves
names without lines, a broken inline tree leaves the out-of-line function alone.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_constants import (
    DW_AT_comp_dir,
    DW_AT_stmt_list,
    DW_TAG_class_type,
    DW_TAG_interface_type,
    DW_TAG_lexical_block,
    DW_TAG_module,
    DW_TAG_namespace,
    DW_TAG_structure_type,
    DW_TAG_subprogram,
    DW_TAG_union_type,
)  # fmt: skip
from profiler.symbolize.dwarf_dies import Die, UnitDies
from profiler.symbolize.inline_tree import InlineTree
from profiler.symbolize.line_cache import LineTableStore
from profiler.symbolize.line_header import read_line_header
from profiler.symbolize.line_table import DwarfLineTable
from profiler.symbolize.unit_index import RangeColumns

#: DIEs whose children are concrete subprograms at file scope: Rust modules and impl blocks are
#: namespaces, Fortran has modules (DWARF 5, sections 3.2.1-3.2.2). gcc and clang place C++ member and
#: lambda definitions at file scope, pointing to their in-class declaration with DW_AT_specification,
#: so the (large) class and structure types are not entered
_CONTAINERS = frozenset((DW_TAG_namespace, DW_TAG_module))
#: where else a concrete subprogram can be: in a type, in another function or in one of its blocks
#: (GNU C nested functions; DWARF 5, section 3.3.1)
_NESTING = _CONTAINERS | {
    DW_TAG_class_type, DW_TAG_structure_type, DW_TAG_union_type, DW_TAG_interface_type, DW_TAG_subprogram,
    DW_TAG_lexical_block,
}
_SUBPROGRAM = frozenset((DW_TAG_subprogram,))


class UnitSymbols:
    """Line table, subprograms and inline trees of one CU, each built lazily."""

    def __init__(self, dies: UnitDies, note: Callable[[str], None], lines: LineTableStore | None = None) -> None:
        """``lines``: line programs decoded by earlier recordings of the file, and where to add this one's."""
        self.dies = dies
        self._report = note
        self._store = lines
        self._lines: DwarfLineTable | None = None
        self._lines_loaded = False
        self._subprograms: RangeColumns | None = None
        self._deep_walked = False
        self._trees: dict[int, InlineTree | None] = {}

    @property
    def lines(self) -> DwarfLineTable | None:
        """The CU's line table (DW_AT_stmt_list, DWARF 5 section 3.1.1), or None if absent or corrupt."""
        if not self._lines_loaded:
            self._lines_loaded = True
            dies = self.dies
            offset, section = dies.integer(dies.top, DW_AT_stmt_list), dies.sections.line
            try:
                if offset is not None and section is not None:
                    comp_dir = dies.text(dies.top, DW_AT_comp_dir)
                    header = read_line_header(section, offset, dies.fmt.address_size, comp_dir, dies.form_text)
                    stored = self._store.get(offset) if self._store is not None else None
                    self._lines = DwarfLineTable(header, section, stored)
                    if stored is None and self._store is not None:
                        self._store.put(offset, self._lines.columns)
            except BinaryError as e:
                self._note(f"line table unreadable ({e})")
        return self._lines

    def subprogram_at(self, svma: int) -> Die | None:
        """The innermost concrete subprogram whose ranges contain ``svma``.

        First only file-scope containers are walked (sibling links skip every function body). If that
        finds nothing, one walk of the whole CU looks for subprograms nested in other DIEs (GNU C nested
        functions, functions local to a lexical block).
        """
        if self._subprograms is None:
            self._subprograms = self._index(_CONTAINERS)
        offset = self._subprograms.value_at(svma)
        if offset is None and not self._deep_walked:
            self._deep_walked = True
            self._subprograms = self._index(_NESTING)
            offset = self._subprograms.value_at(svma)
        return self.dies.die_at(offset) if offset is not None else None

    def _index(self, descend: frozenset[int]) -> RangeColumns:
        triples = []
        for die, _parent in self.dies.scan(self.dies.top, descend, _SUBPROGRAM):
            triples += [(lo, hi, die.offset) for lo, hi in self.dies.ranges(die)]
        return RangeColumns(triples)

    def inline_tree(self, subprogram: Die) -> InlineTree | None:
        """The inline tree of ``subprogram``; None (noted) if its subtree is corrupt."""
        if subprogram.offset not in self._trees:
            tree = None
            try:
                tree = InlineTree(self.dies, subprogram)
            except BinaryError as e:
                self._note(f"inlined calls of the subprogram at 0x{subprogram.offset:x} unreadable ({e})")
            self._trees[subprogram.offset] = tree
        return self._trees[subprogram.offset]

    def _note(self, text: str) -> None:
        self._report(f"unit at 0x{self.dies.header.offset:x}: {text}")
