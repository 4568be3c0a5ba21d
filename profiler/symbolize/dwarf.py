"""Source lines and inlined frames from DWARF debug info, resolved lazily and once per unique address.

``DwarfResolver(elf).resolve(svmas)`` gives, per address, the frames it stands for, **outermost first**:
the out-of-line function (with the line where its chain of inlined calls starts), one frame per inlined
level (``inlined=True``), the innermost with the address's own line: ``addr2line -f -i -C`` read
bottom-up; ``[]`` where no CU covers the address. Nothing is read at construction; each CU is parsed when
an address falls in it, and only the parts that address needs. A corrupt part gives ``[]`` or fewer frames
for the addresses it covers, and a line in ``notes``. What an address resolved to is kept on disk
(``frame_store.py``), so a later run reads no DWARF for it.
The costs and the order of reads: docs/decisions/dwarf-resolution.md."""

from __future__ import annotations

import time
from collections.abc import Sequence

from profiler.binary.cache import TableCache
from profiler.binary.elf import ElfFile
from profiler.binary.symbols import SymbolTable
from profiler.errors import BinaryError
from profiler.model import FrameInfo
from profiler.symbolize.declarations import Declaration, Declarations
from profiler.symbolize.demangle import demangle
from profiler.symbolize.dwarf_constants import CODE_UNIT_TYPES
from profiler.symbolize.dwarf_dies import Die, UnitDies
from profiler.symbolize.dwarf_forms import Abbrev, UnitFormat, parse_abbrevs
from profiler.symbolize.dwarf_sections import DebugSections, has_debug_info, load_sections
from profiler.symbolize.dwarf_units import UnitHeader, read_unit_header
from profiler.symbolize.frame_store import FrameStore, store_key
from profiler.symbolize.function_names import FunctionNames
from profiler.symbolize.line_cache import LineTableStore
from profiler.symbolize.unit_index import UnitIndex
from profiler.symbolize.unit_symbols import UnitSymbols

#: the name of a frame whose DIE has no name, and of the outermost frame when the line table covers an
#: address but no DW_TAG_subprogram does (assembly sources) and no symbol table was given (addr2line's "??")
NO_NAME = "??"
#: notes beyond this many are counted, not kept (a corrupt file could otherwise produce one per CU)
MAX_NOTES = 200
#: what a per-address failure may raise: BinaryError from every bounds check, and, as a last line of
#: defence for a check that was missed, the errors byte slicing, int and numpy conversions raise
_ERRORS = (BinaryError, LookupError, ValueError, ArithmeticError)
_ADDRESS_LIMIT = 1 << 64

Frames = list[FrameInfo]


class DwarfResolver:
    """Names, files, lines and inlined frames for addresses of one ELF file's DWARF.

    ``elf`` is the file that holds the DWARF: the binary itself, or its separate debug file (the caller
    finds it; its addresses are the binary's svmas). Raises BinaryError only if ``elf`` has no
    ``.debug_info`` at all; everything later degrades per address.

    ``symbols`` (the module's symbol table, e.g. ``ObjectFile.symbols``) names the outermost frame where
    DWARF cannot: when no DW_TAG_subprogram covers the address (assembly sources) the covering symbol's
    name is used, as addr2line and llvm-symbolizer do; and a C++ function that DWARF names only by an
    unqualified DW_AT_name (template instances with internal linkage, e.g. instantiated with a lambda
    type, get no DW_AT_linkage_name from gcc) takes the demangled name of a mangled (``_Z``) symbol
    starting at its entry, which adds namespaces and parameters. C symbols are not used for functions
    DWARF names (their clones' ``.part.0`` suffixes and aliases would only split a profile).
    Inlined frames always keep their DWARF names.

    Not thread-safe: use one resolver per thread, or a lock around ``resolve``. Memory: the debug
    sections it reads (inflated), and the DIEs and line tables of the units it has parsed.
    """

    def __init__(
        self,
        elf: ElfFile,
        symbols: SymbolTable | None = None,
        line_cache: TableCache | None = None,
        frame_cache: TableCache | None = None,
    ) -> None:
        """``line_cache``: where decoded line programs are kept between runs (``line_cache.py``; default:
        the user's cache directory); ``frame_cache``: where each address's frames are (``frame_store.py``;
        default: nowhere, so that a resolver reads its DWARF unless its caller chose otherwise)."""
        if not has_debug_info(elf):
            raise BinaryError(f"{elf.path}: no DWARF debug info (.debug_info)")
        self.path = elf.path
        self.build_id = elf.build_id
        self._symbols = symbols if symbols is not None and len(symbols) else None
        self._elf: ElfFile | None = elf
        self._sections: DebugSections | None = None
        self._index: UnitIndex | None = None
        self._units: dict[int, UnitSymbols | None] = {}
        self._line_cache = line_cache if line_cache is not None else TableCache("lines")
        self._line_store: LineTableStore | None = None
        self._abbrevs: dict[tuple[int, UnitFormat], dict[int, Abbrev]] = {}
        self._names = FunctionNames(self._unit_dies_at)
        self._declarations = Declarations(self._unit_holding)
        self._cache: dict[int, Frames] = {}
        self._stored = FrameStore(store_key(elf) if frame_cache is not None else None, frame_cache)
        self.notes: list[str] = []
        self.dropped_notes = 0
        self.unexpected_errors = 0
        self.units_loaded = 0

    # --- public ---------------------------------------------------------------------------------------

    def resolve(self, svmas: Sequence[int], deadline: float | None = None) -> list[Frames | None]:
        """Frames for each address, outermost first; ``[]`` where no DWARF covers it.

        ``deadline`` is a ``time.monotonic()`` value: once it has passed, addresses not yet resolved
        (and not cached) get None instead of frames, so a caller can bound the end of a recording and
        retry later. Without a deadline the result never holds None. The deadline is checked between
        addresses, so it can be overrun by the cost of one unit (70 ms for libpython3.12's ceval.c, the
        largest unit measured).
        """
        out: list[Frames | None] = []
        for address in svmas:
            svma = int(address)
            frames = self._cache.get(svma)
            if frames is None:
                frames = self._stored.get(svma)
            if frames is None:
                if deadline is not None and time.monotonic() >= deadline:
                    out.append(None)
                    continue
                frames = self._resolve_one(svma)
                if not self.notes:  # a file with a part that failed is read again, and says so again
                    self._stored.put(svma, frames)
            self._cache[svma] = frames
            out.append(frames)
        if self._line_store is not None:
            self._line_store.save()  # the line programs decoded for these addresses, for the next recording
        self._stored.save()
        return out

    def resolve_one(self, svma: int) -> Frames:
        """``resolve([svma])[0]``."""
        frames = self.resolve([svma])[0]
        return frames if frames is not None else []

    # --- per address ----------------------------------------------------------------------------------

    def _resolve_one(self, svma: int) -> Frames:
        if not 0 <= svma < _ADDRESS_LIMIT:
            return []
        try:
            index = self._unit_index()
            offset = index.unit_at(svma) if index is not None else None
            unit = self._unit(offset) if offset is not None else None
            return self._frames(unit, svma) if unit is not None else []
        except _ERRORS as e:
            self._failure(f"0x{svma:x}", e)
            return []

    def _frames(self, unit: UnitSymbols, svma: int) -> Frames:
        lines = unit.lines
        row = lines.lookup(svma) if lines is not None else None
        file, line = row if row is not None else (None, None)
        subprogram = unit.subprogram_at(svma)
        if subprogram is None:
            root = lines.source_root if lines is not None else None
            return [FrameInfo(self._symbol_name(svma, None) or NO_NAME, file, line or None, source_root=root)] \
                if row else []  # fmt: skip
        tree = unit.inline_tree(subprogram)
        chain = tree.chain(svma) if tree is not None else []
        outer, is_linkage = self._names.name_of(unit.dies, subprogram)
        if not is_linkage:
            ranges = unit.dies.ranges(subprogram)
            outer = self._symbol_name(svma, ranges[0][0] if ranges else None) or outer
        names = [outer]
        names += [self._names.name_of(unit.dies, unit.dies.die_at(site.die_offset))[0] for site in chain]
        # each level's position is the call site of the level inside it; the innermost's is the row's
        places = [
            (lines.file_name(site.call_file) if lines is not None and site.call_file is not None else None,
             site.call_line)
            for site in chain
        ]  # fmt: skip
        places.append((file, line))
        declared = [self._declaration(unit, die)
                    for die in (subprogram, *(unit.dies.die_at(site.die_offset) for site in chain))]  # fmt: skip
        root = lines.source_root if lines is not None else None
        return [
            FrameInfo(name or NO_NAME, place_file, place_line or None, None, inlined=level > 0,
                      function_file=where[0], function_line=where[1], source_root=root)
            for level, (name, (place_file, place_line), where) in enumerate(zip(names, places, declared))
        ]  # fmt: skip

    def _declaration(self, unit: UnitSymbols, die: Die) -> Declaration:
        """Where the function of ``die`` is declared; (None, None) where that cannot be read, which costs the
        frame its declaration only, not its name and line."""
        try:
            return self._declarations.of(unit, die)
        except _ERRORS as e:
            self._failure(f"declaration of the DIE at 0x{die.offset:x}", e)
            return None, None

    def _symbol_name(self, svma: int, entry: int | None) -> str | None:
        """The demangled symbol covering ``svma``; with an ``entry``, only a mangled one starting there."""
        hit = self._symbols.lookup(svma) if self._symbols is not None else None
        if hit is None or (entry is not None and (hit[1] != entry or not hit[0].startswith("_Z"))):
            return None
        return demangle(hit[0])

    # --- lazily loaded parts --------------------------------------------------------------------------

    def _unit_index(self) -> UnitIndex | None:
        if self._index is None and self._elf is not None:
            elf, self._elf = self._elf, None  # one attempt: a file that fails to load fails once
            try:
                self._sections = load_sections(elf)
            except _ERRORS as e:
                self._failure("debug sections", e)
                return None
            self._index = UnitIndex(self._sections, self._open_dies, self._note)
            self._line_store = LineTableStore(self._sections.line, self._line_cache)
        return self._index

    def _unit(self, offset: int) -> UnitSymbols | None:
        """The unit at .debug_info ``offset`` (None, noted once, if it cannot be read)."""
        if offset not in self._units:
            self._units[offset] = None
            assert self._sections is not None
            try:
                header = read_unit_header(self._sections.info, offset)
                if header.unit_type in CODE_UNIT_TYPES:
                    self._units[offset] = UnitSymbols(self._new_dies(header), self._note, self._line_store)
                    self.units_loaded += 1
            except _ERRORS as e:
                self._failure(f"unit at 0x{offset:x}", e)
        return self._units[offset]

    def _open_dies(self, header: UnitHeader) -> UnitDies:
        unit = self._unit(header.offset)
        if unit is None:
            raise BinaryError(f"unit at 0x{header.offset:x} unreadable")
        return unit.dies

    def _new_dies(self, header: UnitHeader) -> UnitDies:
        assert self._sections is not None
        key = (header.abbrev_offset, header.fmt)
        abbrevs = self._abbrevs.get(key)
        if abbrevs is None:
            abbrevs = self._abbrevs[key] = parse_abbrevs(self._sections.abbrev, header.abbrev_offset, header.fmt)
        return UnitDies(self._sections, header, abbrevs)

    def _unit_dies_at(self, die_offset: int) -> UnitDies | None:
        """The unit holding a .debug_info offset, for references across units (DW_FORM_ref_addr)."""
        unit = self._unit_holding(die_offset)
        return unit.dies if unit is not None else None

    def _unit_holding(self, die_offset: int) -> UnitSymbols | None:
        header = self._index.header_containing(die_offset) if self._index is not None else None
        return self._unit(header.offset) if header is not None else None

    def _failure(self, where: str, error: Exception) -> None:
        """Record why something could not be read. Anything but a BinaryError is a bounds check that
        the code missed: it is counted in ``unexpected_errors`` (tests assert it stays 0)."""
        if not isinstance(error, BinaryError):
            self.unexpected_errors += 1
            self._note(f"{where}: unexpected {error!r}")
        else:
            self._note(f"{where}: {error}")

    def _note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        else:
            self.dropped_notes += 1
