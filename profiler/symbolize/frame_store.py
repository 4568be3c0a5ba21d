"""The frames DWARF gave for each address, kept on disk: a warm ``nprof dump`` reads no DWARF at all.

A Python program's native frames are mostly the same call sites of its interpreter from one run to the
next, and resolving one first reads the file's debug sections, unit index and DIEs
(docs/decisions/dwarf-frame-store.md).

* Key: the file's ``cache_key`` (its build-id), with the sizes of its DWARF sections, its own size and
  mtime, and ``RESOLVER_VERSION``. A file changed after it was linked (strip, objcopy) keeps its build-id;
  its sizes or mtime change (why not a digest of the sections, as ``line_cache.py`` takes: the decision).
* Stored through ``TableCache("frames")`` (``binary/cache.py``: versioned, atomic, numbers only): per
  address its rows; per row what ``DwarfResolver`` fills in a ``FrameInfo``: its name, file and line,
  whether it is inlined, where its function is declared and its source root (strings as indexes into one
  table of UTF-8 strings, decoded when an address is looked up, not at load), packed by address
  (``binary/packed.py``).
* An entry whose arrays do not have the expected types or whose indexes do not fit is discarded whole.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt

from profiler.binary import packed
from profiler.binary.cache import Arrays, TableCache, cache_key
from profiler.binary.elf import ElfFile
from profiler.model import FrameInfo

#: bump when what ``DwarfResolver`` returns for an address changes (names, files, lines, inlining)
RESOLVER_VERSION = 2
#: addresses kept per file: ~60 bytes each with their frames and names, so an entry stays under ~16 MB
#: (a 60 s recording of a Python program calling json, re and sqlite3 resolved ~9,000 native addresses)
MAX_ADDRESSES = 262_144
#: the DWARF sections whose sizes are part of the key
_SECTIONS = (".debug_info", ".debug_abbrev", ".debug_line", ".debug_str", ".debug_line_str", ".debug_ranges",
             ".debug_rnglists", ".debug_aranges", ".debug_addr", ".debug_str_offsets")  # fmt: skip

_ARRAYS = (("addresses", np.uint64), ("address_ends", np.int64), ("names", np.int64), ("files", np.int64),
           ("lines", np.int64), ("inlined", np.bool_), ("function_files", np.int64), ("function_lines", np.int64),
           ("source_roots", np.int64), ("strings", np.uint8), ("string_ends", np.int64))  # fmt: skip
#: the row columns that index the string table (-1: none)
_STRING_COLUMNS = ("names", "files", "function_files", "source_roots")

Frames = list[FrameInfo]


def store_key(elf: ElfFile) -> str | None:
    """The key of ``elf``'s entry, or None for bytes not read from a file (the vdso)."""
    if elf.opened_path is None:
        return None
    try:
        stat = os.stat(elf.opened_path)
    except (OSError, ValueError):
        return None
    sizes = "-".join(str(elf.sections[name].sh_size) if name in elf.sections else "0" for name in _SECTIONS)
    stem = cache_key(elf.build_id, elf.opened_path, stat.st_size, stat.st_mtime_ns)
    return f"resolver-{RESOLVER_VERSION}-{stem}-{stat.st_size}-{stat.st_mtime_ns}-{sizes}"


class FrameStore:
    """The frames of one file's addresses: those stored by earlier runs (read at the first ``get``), and
    those this run resolves (``put``; written by ``save``)."""

    def __init__(self, key: str | None, cache: TableCache | None) -> None:
        """``key`` None (or no enabled ``cache``): nothing is stored or read."""
        self._key = key if cache is not None and cache.enabled else None
        self._cache = cache
        self._stored: Arrays | None = None
        self._strings: dict[int, str] = {}
        self._new: dict[int, Frames] = {}

    def get(self, svma: int) -> Frames | None:
        """The stored frames of ``svma``, or None if it was never stored."""
        if self._key is None:
            return None
        stored = self._loaded()
        found = packed.span(stored["addresses"], stored["address_ends"], svma)
        if found is None:
            return None
        return [_row(stored, row, self._string) for row in range(*found)]

    def put(self, svma: int, frames: Frames) -> None:
        if self._key is not None:
            self._new[svma] = frames

    def save(self) -> None:
        """Write the stored and the new addresses together, if there are new ones and room for them. The
        stored rows are merged as they are: only the string table is read back."""
        if self._key is None or not self._new:
            return
        stored = self._loaded()
        new, self._new = self._new, {}
        if len(stored["addresses"]) + len(new) > MAX_ADDRESSES:
            return  # what is stored stays; the rest is resolved again each time
        arrays = _merged(stored, new, [self._string(i) for i in range(len(stored["string_ends"]))])
        assert self._cache is not None
        if self._cache.store(self._key, arrays):
            self._stored, self._strings = arrays, {}

    def _loaded(self) -> Arrays:
        if self._stored is None:
            self._stored = self._load()
        return self._stored

    def _string(self, index: int) -> str:
        text = self._strings.get(index)
        if text is None:
            ends = self._loaded()["string_ends"]
            start = int(ends[index - 1]) if index else 0
            raw = self._loaded()["strings"][start : int(ends[index])].tobytes()
            text = self._strings[index] = raw.decode("utf-8", "surrogateescape")
        return text

    def _load(self) -> Arrays:
        assert self._key is not None and self._cache is not None
        arrays = self._cache.load(self._key)
        if arrays is None:
            return _empty()
        if not _well_formed(arrays):
            self._cache.discard(self._key)
            return _empty()
        return arrays


def _empty() -> Arrays:
    return {name: np.zeros(0, dtype=dtype) for name, dtype in _ARRAYS}


def _merged(stored: Arrays, new: dict[int, Frames], strings: list[str]) -> Arrays:
    """The stored addresses and the new ones (none of them stored), sorted; ``strings``: the stored string
    table, which the new rows' strings join where they are not in it yet."""
    index = {text: i for i, text in enumerate(strings)}
    added: list[str] = []

    def at(text: str | None) -> int:
        if text is None:
            return -1
        i = index.get(text)
        if i is None:
            i = index[text] = len(index)
            added.append(text)
        return i

    order = sorted(new)
    rows = [f for svma in order for f in new[svma]]
    columns: packed.Columns = {
        "names": np.array([at(f.name) for f in rows], dtype=np.int64),
        "files": np.array([at(f.file) for f in rows], dtype=np.int64),
        "lines": np.array([f.line or 0 for f in rows], dtype=np.int64),
        "inlined": np.array([f.inlined for f in rows], dtype=np.bool_),
        "function_files": np.array([at(f.function_file) for f in rows], dtype=np.int64),
        "function_lines": np.array([f.function_line or 0 for f in rows], dtype=np.int64),
        "source_roots": np.array([at(f.source_root) for f in rows], dtype=np.int64),
    }
    addresses, ends, merged = packed.merged(
        stored["addresses"], stored["address_ends"], {name: stored[name] for name in columns},
        np.array(order, dtype=np.uint64), np.cumsum([len(new[svma]) for svma in order], dtype=np.int64), columns,
    )  # fmt: skip
    encoded = [text.encode("utf-8", "surrogateescape") for text in added]
    blob_size = len(stored["strings"])
    return {
        "addresses": addresses,
        "address_ends": ends,
        **merged,
        "strings": np.concatenate((stored["strings"], np.frombuffer(b"".join(encoded), dtype=np.uint8))),
        "string_ends": np.concatenate((stored["string_ends"],
                                       blob_size + np.cumsum([len(e) for e in encoded], dtype=np.int64))),
    }


def _row(arrays: Arrays, row: int, string: Callable[[int], str]) -> FrameInfo:
    """The frame of row ``row``."""

    def text(column: str) -> str | None:
        at = int(arrays[column][row])
        return string(at) if at >= 0 else None

    return FrameInfo(string(int(arrays["names"][row])), text("files"), int(arrays["lines"][row]) or None, None,
                     inlined=bool(arrays["inlined"][row]), function_file=text("function_files"),
                     function_line=int(arrays["function_lines"][row]) or None,
                     source_root=text("source_roots"))  # fmt: skip


def _well_formed(arrays: Arrays) -> bool:
    """Every array is one-dimensional and of its dtype; the rows packed by address (``packed.well_formed``),
    and so are the strings in their blob; every string index in the string table."""
    for name, dtype in _ARRAYS:
        column = arrays.get(name)
        if column is None or column.dtype != dtype or column.ndim != 1:
            return False
    string_ends, names = arrays["string_ends"], cast("npt.NDArray[np.int64]", arrays["names"])
    rows = len(names)
    if any(len(arrays[n]) != rows for n, _ in _ARRAYS[2:9]):
        return False
    if not packed.well_formed(arrays["addresses"], arrays["address_ends"], rows):
        return False
    strings = len(string_ends)
    if not packed.well_formed(np.arange(strings), string_ends, len(arrays["strings"])):
        return False
    if not bool(np.all((names >= 0) & (names < strings))):
        return False
    others = (cast("npt.NDArray[np.int64]", arrays[n]) for n in _STRING_COLUMNS[1:])
    return all(bool(np.all((column >= -1) & (column < strings))) for column in others)
