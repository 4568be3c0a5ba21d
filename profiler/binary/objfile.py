"""An object file and the query-ready tables built from it, each built lazily, the first time it is needed.

This is the unit the unwinders and the symbolizer share: one ``ObjectFile`` per distinct file, whichever
processes map it. Files are identified by (device, inode, size, mtime), so the same libc mapped by many
targets (or seen through different /proc/PID/root paths) is parsed once.
"""

from __future__ import annotations

import os
import threading

from profiler.binary.elf import ElfFile
from profiler.binary.prologue import FrameState, FunctionLayout
from profiler.binary.symbols import SymbolTable, load_symbols
from profiler.errors import BinaryError

#: functions longer than this are not swept for prologue analysis (the rbp chain is used as is)
MAX_SWEEP_BYTES = 1 << 20


class ObjectFile:
    """Symbols and unwind helpers for one ELF image."""

    def __init__(self, elf: ElfFile) -> None:
        self.elf = elf
        self.path = elf.path
        self.build_id = elf.build_id
        self._symbols: SymbolTable | None = None
        self._symbols_loaded = False
        self._layouts: dict[int, FunctionLayout | None] = {}
        self._frame_states: dict[int, FrameState | None] = {}

    @property
    def symbols(self) -> SymbolTable | None:
        if not self._symbols_loaded:
            self._symbols_loaded = True
            try:
                self._symbols = load_symbols(self.elf)
            except (BinaryError, ValueError):
                self._symbols = None
        return self._symbols

    def frame_state(self, svma: int) -> FrameState | None:
        """Prologue analysis at ``svma``: None if the function is unknown (no symbol covers it)."""
        try:
            return self._frame_states[svma]
        except KeyError:
            pass
        state = None
        symbols = self.symbols
        hit = symbols.lookup(svma) if symbols is not None else None
        if hit is not None:
            _name, start, end = hit
            layout = self._layouts.get(start, False)
            if layout is False:
                layout = None
                if end - start <= MAX_SWEEP_BYTES:
                    code = self.elf.read_svma(start, end - start)
                    if code:
                        layout = FunctionLayout(code, start)
                self._layouts[start] = layout
            if layout is not None:
                state = layout.state_at(svma)
        self._frame_states[svma] = state
        return state


class ObjectFileCache:
    """Process-wide cache of opened object files, keyed by file identity."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int, int, int, int], ObjectFile] = {}
        self._failed: dict[tuple[int, int, int, int], BinaryError] = {}
        self._lock = threading.Lock()

    def open(self, host_path: str, display_path: str | None = None) -> ObjectFile:
        """Open ``host_path`` (a path valid in nprof's namespace); raise BinaryError if unusable."""
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
                obj = ObjectFile(ElfFile(host_path, display_path=display_path))
            except BinaryError as e:
                self._failed[key] = e
                raise
            self._by_key[key] = obj
            return obj

    def from_bytes(self, data: bytes, display_path: str) -> ObjectFile:
        """An image that exists only in memory, such as the vdso copied from the target."""
        return ObjectFile(ElfFile(display_path, data=data, display_path=display_path))
