"""An object file and the query-ready tables built from it, each built lazily, the first time it is needed.

This is the unit the unwinders and the symbolizer share: one ``ObjectFile`` per distinct file, whichever
processes map it. Files are identified by (device, inode, size, mtime), so the same libc mapped by many
targets (or seen through different /proc/PID/root paths) is parsed once.

Tables and where they come from:

* ``symbols``: the file's ``.symtab``; else the separate debug file's ``.symtab`` (Debian's libc has only
  ``.dynsym``, its debug file has the static functions, e.g. ``msort_with_tmp``); else ``.dynsym``.
* ``unwind_table``: DWARF CFI from ``.eh_frame`` and the file's ``.debug_frame`` (``binary.cfi``),
  restored from / saved to the disk cache by build-id; ``debug_unwind_table``: the debug file's
  ``.debug_frame``, opened only when a pc has no row in the file's own CFI (opening libc's debug file
  costs ~50 ms, more than the rest of its table).
* ``frame_state``: prologue analysis, for the innermost frame of code without CFI.
* ``plt_stubs``: the symbols the file's PLT stubs lead to (``binary.plt``), for pcs no symbol covers.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import threading
import zlib

from profiler.binary.cache import TableCache, cache_key
from profiler.binary.callsite import MAX_CALL_LENGTH, CallBefore, call_before
from profiler.binary.cfi import UnwindRule, UnwindTable, load_unwind_table, save_unwind_table
from profiler.binary.cfi.load import NO_CFI
from profiler.binary.debugfile import find_debug_file
from profiler.binary.elf import ElfFile
from profiler.binary.minidebug import mini_debuginfo
from profiler.binary.plt import PLT_SECTIONS, PUSH_RIP, PltStubs, load_plt_stubs, plt_section
from profiler.binary.prologue import FrameState, FunctionLayout
from profiler.binary.symbols import SymbolTable, load_symbols
from profiler.errors import BinaryError

#: addresses whose ``call_before`` is kept before the memo is cleared (a bound on memory: the stack scan
#: asks it of any stack word that lies in code, stale ones included)
MAX_CALLS_BEFORE = 1 << 16
#: functions longer than this are not swept for prologue analysis (the rbp chain is used as is)
MAX_SWEEP_BYTES = 1 << 20


class ObjectFile:
    """Symbols and unwind helpers for one ELF image.

    ``root`` is the prefix under which the target's paths open here (``/proc/PID/root``), used to find
    the separate debug file in the target's filesystem; ``identity`` is (size, mtime_ns), the disk-cache
    key of a file without a build-id; ``unwind_cache`` None keeps compiled tables in memory only.
    """

    def __init__(
        self,
        elf: ElfFile,
        root: str = "/",
        identity: tuple[int, int] | None = None,
        unwind_cache: TableCache | None = None,
    ) -> None:
        self.elf = elf
        self.path = elf.path
        self.build_id = elf.build_id
        self.root = root
        #: the root directory of the first target seen mapping the file (``/proc/PID/root``), where its debug
        #: files may be installed when ``root`` is not it (``debugfile.find_debug_file``); None: this system's
        self.target_root: str | None = None
        #: whether ``root`` was this system's root directory when the file was opened: its path then names
        #: a file of this system's packages. Known now, for /proc/PID/root of a target that has exited by
        #: the end of the recording (when ``symbolize/stripped.py`` asks) can no longer be looked at.
        self.in_system_root = same_root_directory(root)
        self._identity = identity
        self._unwind_cache = unwind_cache
        self._key: str | None = None  # "" once known that the file has no cache key
        self._symbols: SymbolTable | None = None
        self._symbols_loaded = False
        self._plt_stubs: PltStubs | None = None
        self._debug_elf: ElfFile | None = None
        self._debug_loaded = False
        self._unwind_table: UnwindTable | None = None
        self._unwind_loaded = False
        self._debug_unwind_table: UnwindTable | None = None
        self._debug_unwind_loaded = False
        #: why ``unwind_table`` is None, or which CFI candidates were left out (corrupt, compressed...)
        self.unwind_notes: list[str] = []
        self._layouts: dict[int, FunctionLayout | None] = {}
        self._frame_states: dict[int, FrameState | None] = {}
        self._calls_before: dict[int, CallBefore] = {}

    @property
    def debug_elf(self) -> ElfFile | None:
        """The separate debug file (by build-id or .gnu_debuglink), opened once; None if not installed."""
        if not self._debug_loaded:
            self._debug_loaded = True
            try:
                link = self.elf.debuglink
            except BinaryError:
                link = None
            path = find_debug_file(self.path, self.build_id, link, self.root, target_root=self.target_root)
            if path is not None:
                try:
                    debug = ElfFile(path)
                except BinaryError:
                    debug = None
                if debug is not None and self.build_id and debug.build_id and debug.build_id != self.build_id:
                    debug.close()  # a debug file of another build: its addresses would be wrong
                    debug = None
                self._debug_elf = debug
        return self._debug_elf

    @property
    def symbols(self) -> SymbolTable | None:
        if not self._symbols_loaded:
            self._symbols_loaded = True
            self._symbols = self._load_symbols()
        return self._symbols

    @property
    def plt_stubs(self) -> PltStubs:
        """The file's own PLT stubs (a separate debug file's PLT sections are NOBITS); empty if unreadable."""
        if self._plt_stubs is None:
            try:
                self._plt_stubs = load_plt_stubs(self.elf)
            except (BinaryError, ValueError, struct.error):
                self._plt_stubs = PltStubs([], [], [])
        return self._plt_stubs

    def _load_symbols(self) -> SymbolTable | None:
        """The file's ``.symtab``; else a separate debug file's; else ``.dynsym`` with the MiniDebugInfo's
        functions (``minidebug.py``: a debug file has every symbol, the MiniDebugInfo only functions); else
        ``.dynsym``."""
        own = _symbols_of(self.elf)
        if own is not None and own.source == ".symtab":
            return own
        debug = self.debug_elf
        if debug is not None:
            full = _symbols_of(debug)
            if full is not None and full.source == ".symtab":
                full.source = f"{debug.path}:.symtab"
                return full
        mini = mini_debuginfo(self.elf)
        if mini is not None:
            return _symbols_of(self.elf, mini) or own
        return own

    @property
    def unwind_table(self) -> UnwindTable | None:
        """Compiled DWARF CFI of the file itself, built on first use; None (``unwind_notes`` say why)."""
        if not self._unwind_loaded:
            self._unwind_loaded = True
            self._unwind_table = self._load_table(self.elf, self._cache_key())
        return self._unwind_table

    @property
    def debug_unwind_table(self) -> UnwindTable | None:
        """The separate debug file's ``.debug_frame``, built on first use; None if there is none."""
        if not self._debug_unwind_loaded:
            self._debug_unwind_loaded = True
            debug = self.debug_elf
            if debug is not None:
                key = self._cache_key()
                self._debug_unwind_table = self._load_table(debug, key and key + "-debug")
        return self._debug_unwind_table

    def _load_table(self, elf: ElfFile, key: str | None) -> UnwindTable | None:
        try:
            table, notes = load_unwind_table(elf, self._unwind_cache, key)
        except BinaryError as e:  # a section that cannot even be sliced from the file
            table, notes = None, [str(e)]
        self.unwind_notes.extend(notes)
        return table

    def unwind_rule(self, svma: int) -> UnwindRule | None:
        """The CFI rule at ``svma`` (memoized per address), or None where no FDE covers it."""
        table = self._unwind_table if self._unwind_loaded else self.unwind_table
        rule = table.rule_for(svma) if table is not None else None
        if rule is None:
            debug = self._debug_unwind_table if self._debug_unwind_loaded else self.debug_unwind_table
            if debug is not None:
                rule = debug.rule_for(svma)
        return rule

    def function_start(self, svma: int) -> int | None:
        """Where the function holding ``svma`` starts, from the CFI, for code no symbol covers (a stripped
        file): compilers emit one FDE per function, and one per part split off (gcc's ``foo.cold``, which
        has a symbol of its own where symbols are kept). None where no FDE covers ``svma``."""
        for table in (self.unwind_table, self.debug_unwind_table):
            start = table.fde_start(svma) if table is not None else None
            if start is not None:
                return start
        return None

    def unwind_problems(self) -> tuple[int, list[str]]:
        """Corrupt or unusable CFI met in this file so far: (count, the first messages). Frames in the
        affected ranges were unwound with frame pointers instead."""
        messages = [n for n in self.unwind_notes if not n.endswith(NO_CFI)]
        count = len(messages)
        for table in (self._unwind_table, self._debug_unwind_table):
            if table is not None and table.stats.bad_fdes:
                count += table.stats.bad_fdes
                messages.extend(table.stats.errors)
        return count, messages

    def save_unwind_table(self) -> bool:
        """Store the FDEs decoded so far in the disk cache (call at the end of a recording)."""
        key = self._cache_key()
        if self._unwind_cache is None or key is None:
            return False
        saved = False
        for table, table_key in ((self._unwind_table, key), (self._debug_unwind_table, key + "-debug")):
            if table is not None:
                saved = save_unwind_table(table, self._unwind_cache, table_key) or saved
        return saved

    def _cache_key(self) -> str | None:
        """The disk-cache key: build-id (or path, size, mtime), plus a CRC32 of ``.eh_frame``.

        A build-id names a build, not the bytes of this copy of it: a copy whose CFI was damaged, or a
        file rewritten in place by a tool that kept the note, must not be given the tables of the intact
        file. The checksum costs well under a millisecond for libc-sized sections.
        """
        if self._key is not None:
            return self._key or None
        if self.build_id is None and self._identity is None:
            self._key = ""
            return None
        size, mtime = self._identity or (0, 0)
        try:
            eh_frame = self.elf.section_data(".eh_frame")
        except BinaryError:
            eh_frame = None
        crc = zlib.crc32(eh_frame) if eh_frame is not None else 0
        self._key = f"{cache_key(self.build_id, self.path, size, mtime)}-{crc:08x}"
        return self._key

    def frame_state(self, svma: int) -> FrameState | None:
        """Prologue analysis at ``svma``: None if the function is unknown (no symbol covers it, and it is
        not a PLT stub)."""
        try:
            return self._frame_states[svma]
        except KeyError:
            pass
        state = None
        symbols = self.symbols
        hit = symbols.lookup(svma) if symbols is not None else None
        span = (hit[1], hit[2], 0) if hit is not None else self._plt_stub(svma)
        if span is not None:
            start, end, pushed = span
            if start in self._layouts:
                layout = self._layouts[start]
            else:
                layout = None
                if end - start <= MAX_SWEEP_BYTES:
                    code = self.elf.read_svma(start, end - start)
                    if code:
                        layout = FunctionLayout(code, start)
                self._layouts[start] = layout
            if layout is not None:
                state = layout.state_at(svma)
                if pushed and state is not None:
                    state = dataclasses.replace(state, ra_offset=state.ra_offset + pushed)
        self._frame_states[svma] = state
        return state

    def _plt_stub(self, svma: int) -> tuple[int, int, int] | None:
        """(start, end, bytes pushed above the return address on entry) of the PLT stub holding ``svma``, which
        no symbol covers, for a file that has no CFI for its PLT: LLD (the linker rustc uses) writes none, nor
        does GNU ld with --no-ld-generated-unwind-info; a sample there had a one-frame stack. Each stub is
        analysed as a function of its own (``plt.PLT_SECTIONS``); the first ``.plt`` entry, the lazy
        resolver's, is entered with the relocation index the calling stub pushed (System V x86-64 psABI,
        "Procedure Linkage Table")."""
        found = plt_section(self.elf, svma)
        if found is None:
            return None
        name, info = found
        size = info.sh_entsize or PLT_SECTIONS[name]
        start = info.sh_addr + (svma - info.sh_addr) // size * size
        resolver = name == ".plt" and start == info.sh_addr and self.elf.read_svma(start, 2) == PUSH_RIP
        return start, start + size, 8 if resolver else 0

    def call_before(self, svma: int) -> CallBefore:
        """What the code right before ``svma`` is (``callsite.call_before``), once per address: the stack
        scan asks it of every word that lies in this file's code."""
        try:
            return self._calls_before[svma]
        except KeyError:
            pass
        if len(self._calls_before) >= MAX_CALLS_BEFORE:
            self._calls_before.clear()
        code = self.elf.read_svma(svma - MAX_CALL_LENGTH, MAX_CALL_LENGTH) if svma >= MAX_CALL_LENGTH else b""
        found = self._calls_before[svma] = call_before(code, svma)
        return found

    def in_plt(self, svma: int) -> bool:
        """Whether ``svma`` is in a PLT section: a direct call to another module's function targets a stub."""
        return plt_section(self.elf, svma) is not None


class ObjectFileCache:
    """Process-wide cache of opened object files, keyed by file identity.

    ``unwind_cache`` is the on-disk cache of compiled unwind tables (default: ``$XDG_CACHE_HOME/nprof``);
    pass ``TableCache("cfi", enabled=False)`` to keep everything in memory.
    """

    def __init__(self, unwind_cache: TableCache | None = None) -> None:
        self.unwind_cache = unwind_cache if unwind_cache is not None else TableCache("cfi")
        self._by_key: dict[tuple[int, int, int, int], ObjectFile] = {}
        self._failed: dict[tuple[int, int, int, int], BinaryError] = {}
        self._by_bytes: dict[tuple[str, bytes], ObjectFile] = {}
        self._lock = threading.Lock()

    def open(self, host_path: str, display_path: str | None = None, target_root: str | None = None) -> ObjectFile:
        """Open ``host_path`` (a path valid in nprof's namespace); raise BinaryError if unusable.
        ``target_root``: the root directory of the process that maps it (``/proc/PID/root``)."""
        try:
            st = os.stat(host_path)
        except OSError as e:
            raise BinaryError(f"{display_path or host_path}: cannot open ({e.strerror})") from e
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._by_key.get(key)
            if hit is not None:
                return hit
            if key in self._failed:
                raise self._failed[key]
            try:
                elf = ElfFile(host_path, display_path=display_path)
                root = _root_of(host_path, display_path)
                obj = ObjectFile(elf, root, (st.st_size, st.st_mtime_ns), self.unwind_cache)
                if target_root is not None and not same_root_directory(target_root):
                    obj.target_root = target_root
            except BinaryError as e:
                self._failed[key] = e
                raise
            self._by_key[key] = obj
            return obj

    def from_bytes(self, data: bytes, display_path: str) -> ObjectFile:
        """An image that exists only in memory, such as the vdso copied from the target (its tables are
        small, so they are not cached on disk). Kept by content: every process on one kernel maps the same
        vdso, and an address space reads it again at each refresh of its maps."""
        key = (display_path, data)
        with self._lock:
            hit = self._by_bytes.get(key)
            if hit is None:
                hit = self._by_bytes[key] = ObjectFile(ElfFile(display_path, data=data, display_path=display_path))
            return hit

    def objects(self) -> list[ObjectFile]:
        """Every file opened so far."""
        with self._lock:
            return list(self._by_key.values())

    def save_unwind_tables(self) -> int:
        """Store every table that decoded FDEs since it was loaded, for the next attach to start with
        them (call at the end of a recording); returns how many files were written."""
        return sum(obj.save_unwind_table() for obj in self.objects())


def _symbols_of(elf: ElfFile, supplement: ElfFile | None = None) -> SymbolTable | None:
    try:
        return load_symbols(elf, supplement)
    except (BinaryError, ValueError):
        return None


def same_root_directory(root: str) -> bool:
    """Whether ``root`` (a target's ``/proc/PID/root``, or "/") is nprof's own root directory."""
    if root == "/":
        return True
    try:
        theirs, ours = os.stat(root), os.stat("/")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def _root_of(host_path: str, display_path: str | None) -> str:
    """The prefix that turns a target path into ``host_path`` ("/proc/PID/root"), "/" if none."""
    if display_path and display_path.startswith("/") and host_path.endswith(display_path):
        prefix = host_path[: len(host_path) - len(display_path)]
        return prefix or "/"
    return "/"
