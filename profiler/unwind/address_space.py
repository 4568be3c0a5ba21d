"""The modules of one target process and the tables behind them: pc -> (module, bias, object file).

Module ids are stable for the life of a recording: a module seen again after a maps refresh (same path,
inode and bias) keeps its id, so interned frames stay valid.

A pc outside every known executable mapping makes the maps be read again, which picks up ``dlopen``ed
libraries and new JIT regions. When the pc is known to be code (a thread's rip, or a return address that
CFI unwound) the refresh happens at once: the maps read are older than the code the thread ran, and
every sample until a later refresh would show a bare address with no callers. A program that loads
libraries as it goes (``import numpy`` maps 14 of them, one after another) loses none of its samples.
Any other pc (from a frame-pointer walk through code that uses rbp for data) refreshes at most once per
``REFRESH_INTERVAL``. A library unloaded and another loaded at the same addresses causes no miss: its
pcs are named and unwound from the first one, whose ranges still cover them, until the maps are read
again. So the lines of the maps that map code are compared with the last ones every ``RECHECK_INTERVAL``
(``recheck``), and the maps are parsed again only when they changed. Reading them whole every second, a
program that swapped one library for another at the same address showed 68 of 226 samples as a lone
frame named from the first library.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

from profiler.binary.objfile import ObjectFile, ObjectFileCache
from profiler.errors import BinaryError
from profiler.model import Module
from profiler.target.maps import Mapping
from profiler.target.process import TargetProcess
from profiler.target.procfs import printable

#: least time between two refreshes caused by pcs that may not be code (a frame-pointer walk can yield any
#: value, and reading the maps costs: 0.8 ms for the 186 mappings of a Python that imported numpy)
REFRESH_INTERVAL = 0.2
#: longest time the code mapped goes unchecked: ``dlclose`` then ``dlopen`` of another library often maps
#: it where the first one was, and every pc in it would be named from the first one, whose ranges still
#: cover it (a Python that imported numpy: 50-130 us a check, ``maps.executable_lines``; 0.1% of a core)
RECHECK_INTERVAL = 0.1
#: a check is made at most once per this many times what the last one cost: a process with tens of
#: thousands of mappings (a JVM's, a big allocator's) takes milliseconds to list, and is checked less often,
#: so checking never takes more than 1% of a core
CHECK_SPACING = 100
#: x86-64's base page is 4 KiB (the kernel's PAGE_SHIFT): a code pc that is still unknown right after a
#: refresh makes its page stop triggering refreshes of its own
PAGE_SHIFT = 12
#: pages remembered as outside the maps before the memory is emptied (a bound on memory)
MAX_MISSED_PAGES = 1024


@dataclass
class ModuleEntry:
    """One executable range and what it belongs to."""

    start: int
    end: int
    module: Module
    obj: ObjectFile | None  #: None for file-less code (JIT) or an unreadable file

    @property
    def bias(self) -> int:
        return self.module.bias


class ModuleRegistry:
    """Module ids shared by every process of a recording: one table for the session and its symbolizer.

    The same file mapped at the same bias in two processes is one module; names resolve identically.
    """

    def __init__(self) -> None:
        self.modules: list[Module] = []
        self.objects: dict[int, ObjectFile] = {}  #: module id -> object file, for the symbolizer
        self.errors: dict[str, str] = {}  #: path -> why its file could not be used
        self._ids: dict[tuple[str, int, int], int] = {}

    def intern(
        self, path: str, inode: int, start: int, end: int, bias: int, obj: ObjectFile | None, file_backed: bool
    ) -> Module:
        key = (path, inode, bias)
        mid = self._ids.get(key)
        if mid is None:
            mid = len(self.modules)
            self._ids[key] = mid
            self.modules.append(
                Module(mid, path, obj.build_id if obj else None, start, end, bias, file_backed)
            )
            if obj is not None:
                self.objects[mid] = obj
        return self.modules[mid]


class AddressSpace:
    def __init__(
        self, process: TargetProcess, cache: ObjectFileCache, registry: ModuleRegistry | None = None
    ) -> None:
        self.process = process
        self.cache = cache
        self.registry = registry or ModuleRegistry()
        self._starts: list[int] = []
        self._entries: list[ModuleEntry] = []
        self._last_refresh = self._last_check = 0.0
        self._check_interval = RECHECK_INTERVAL
        self._code_lines: bytes | None = None
        #: pages of code pcs still outside every mapping right after a refresh (the [vsyscall] page, code
        #: unmapped since its capture): their misses refresh only as often as other pcs' do
        self._missed_pages: set[int] = set()
        #: bumped whenever the executable ranges or the modules behind them change: what the unwinder found
        #: at a pc (its per-pc memo, a walk kept for reuse: ``unwind/reuse.py``) holds within one generation
        self.generation = 0
        self.refresh()

    @property
    def modules(self) -> list[Module]:
        return self.registry.modules

    @property
    def objects(self) -> dict[int, ObjectFile]:
        return self.registry.objects

    def find(self, avma: int, code: bool = False) -> ModuleEntry | None:
        """The executable range holding ``avma``, reading the maps again on a miss: at once if ``code``
        (``avma`` was executed or is a return address unwound by CFI), else at most once per
        ``REFRESH_INTERVAL``."""
        entry = self._find(avma)
        if entry is not None:
            return entry
        page = avma >> PAGE_SHIFT
        if code and page not in self._missed_pages:
            self.refresh()
            entry = self._find(avma)
            if entry is None:
                if len(self._missed_pages) >= MAX_MISSED_PAGES:
                    self._missed_pages.clear()
                self._missed_pages.add(page)
            return entry
        if time.monotonic() - self._last_refresh >= REFRESH_INTERVAL:
            self.refresh()
            entry = self._find(avma)
        return entry

    def recheck(self, now: float) -> None:
        """Check the code mapped if nothing did for ``RECHECK_INTERVAL`` (or ``CHECK_SPACING`` times what the
        last check cost, if more), between ticks."""
        if now - self._last_check >= self._check_interval:
            self._check(now)

    def _check(self, now: float) -> None:
        """Read the maps again if the lines that map code changed since the last check or read."""
        self._last_check = now
        start = time.monotonic()
        lines = self.process.code_map_lines()
        self._check_interval = max(RECHECK_INTERVAL, CHECK_SPACING * (time.monotonic() - start))
        if lines is not None and lines != self._code_lines:
            self.refresh()

    def _find(self, avma: int) -> ModuleEntry | None:
        i = bisect.bisect_right(self._starts, avma) - 1
        if i >= 0:
            entry = self._entries[i]
            if avma < entry.end:
                return entry
        return None

    def refresh(self) -> None:
        self._last_refresh = self._last_check = time.monotonic()
        self._code_lines = self.process.code_map_lines()  # what the next check compares with
        maps = self.process.refresh_maps().mappings
        if not maps and self._entries:  # gone since (an exit between ticks): keep what the samples need
            return
        groups: dict[tuple[str, int], list[Mapping]] = {}
        for m in maps:
            if m.path and m.path != "[vsyscall]":
                groups.setdefault((m.path, m.inode), []).append(m)
        entries = []
        for m in maps:
            if not m.executable or m.path == "[vsyscall]":
                continue
            if m.path:
                module, obj = self._file_module(m, groups[(m.path, m.inode)])
            else:
                label = f"[anon:{m.start:x}]"
                module, obj = self.registry.intern(label, 0, m.start, m.end, m.start, None, False), None
            entries.append(ModuleEntry(m.start, m.end, module, obj))
        entries.sort(key=lambda e: e.start)
        if [(e.start, e.end, e.module.id) for e in entries] != [(e.start, e.end, e.module.id) for e in self._entries]:
            self.generation += 1
        self._entries = entries
        self._starts = [e.start for e in entries]

    def _file_module(self, m: Mapping, group: list[Mapping]) -> tuple[Module, ObjectFile | None]:
        start = min(g.start for g in group)
        end = max(g.end for g in group)
        obj = self._open(m)
        bias = m.start - m.offset  # right for any file mapped without gaps; refined from PT_LOAD below
        if obj is not None:
            refined = obj.elf.bias_for(m.start, m.offset, m.executable)
            if refined is not None:
                bias = refined
        display = printable(m.path.removesuffix(" (deleted)"))
        module = self.registry.intern(display, m.inode, start, end, bias, obj, m.path.startswith("/"))
        return module, obj

    def _open(self, m: Mapping) -> ObjectFile | None:
        try:
            if m.path == "[vdso]":
                data = self.process.read(m.start, m.end - m.start)
                return self.cache.from_bytes(data, "[vdso]") if data else None
            if not m.path.startswith("/"):
                return None
            return self.cache.open(self.process.mapped_file_path(m), m.path, self.process.root_path)
        except BinaryError as e:
            self.registry.errors[m.path] = str(e)
            return None
