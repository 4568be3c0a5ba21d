"""Decoded line tables kept on disk, so a line program is decoded once per file, not once per recording.

Decoding line programs is ~40% of the symbolization at the end of a recording: 0.4-0.55 s of 1.0-1.3 s
after 3 s of a Python program calling json, re, sqlite3 and xml (68-73 units of libpython, libc and
libsqlite3). What a program decodes to depends only on the bytes of ``.debug_line``, so:

* Key: a digest of the whole ``.debug_line`` section, and ``line_table.DECODER_VERSION``. A file changed
  after it was linked (strip, objcopy, damage) keeps its build-id but not its line programs, so the
  build-id alone would not do; a file without a build-id is cached all the same.
* Stored through ``TableCache("lines")`` (``binary/cache.py``: versioned, written atomically, numbers
  only), packed: the rows of every program in four columns, and per program its offset in ``.debug_line``
  and where its rows end. File names are not stored; the program's header, read each time, gives them.
  (Stored first as one archive member per program column, libpython's entries had 224-492 members and
  took 27-45 ms of CPU to load at each recording; packed, 8-20 ms.)
* An entry whose columns do not have the decoder's types, or whose program bounds do not fit its rows, is
  discarded whole, and the programs are decoded again.
"""

from __future__ import annotations

import hashlib

import numpy as np

from profiler.binary import packed
from profiler.binary.cache import Arrays, TableCache
from profiler.symbolize.line_table import DECODER_VERSION, LineColumns

#: the columns of a decoded program, in ``LineColumns`` order, with the dtype each must have
_COLUMNS = (("addresses", np.uint64), ("files", np.int64), ("lines", np.int64), ("ends", np.bool_))
#: per program: its offset in ``.debug_line``, and the end of its rows in the columns (cumulative)
_INDEX = (("programs", np.uint64), ("program_ends", np.int64))
#: rows kept per section: 25 bytes a row, so an entry stays under ~100 MB, read whole at its first use
#: (all of libpython3.11's 146 programs are 620,836 rows)
MAX_ROWS = 4_000_000


class LineTableStore:
    """The decoded programs of one ``.debug_line`` section: those stored by earlier recordings, and those
    this one decodes (written by ``save``)."""

    def __init__(self, line_section: bytes | None, cache: TableCache) -> None:
        self._cache = cache
        self._key: str | None = None
        if line_section is not None and cache.enabled:
            digest = hashlib.sha256(line_section).hexdigest()[:40]
            self._key = f"decoder-{DECODER_VERSION}-packed-debug-line-{digest}"
        self._stored: Arrays | None = None
        self._new: dict[int, LineColumns] = {}

    def get(self, offset: int) -> LineColumns | None:
        """The columns of the program at ``offset``, if stored (views of the stored columns)."""
        if self._key is None:
            return None
        if self._stored is None:
            self._stored = self._load()
        found = packed.span(self._stored["programs"], self._stored["program_ends"], offset)
        if found is None:
            return self._new.get(offset)
        start, end = found
        return LineColumns(*(self._stored[name][start:end] for name, _ in _COLUMNS))

    def put(self, offset: int, columns: LineColumns) -> None:
        if self._key is not None:
            self._new[offset] = columns

    def save(self) -> None:
        """Write the stored and the new programs together, if there are new ones."""
        if self._key is None or not self._new:
            return
        stored = self._stored if self._stored is not None else self._load()
        programs = {int(offset): at for at, offset in enumerate(stored["programs"])}
        new = {offset: columns for offset, columns in self._new.items() if offset not in programs}
        self._new = {}
        rows = len(stored["program_ends"]) and int(stored["program_ends"][-1])
        if not new or rows + sum(len(columns.addresses) for columns in new.values()) > MAX_ROWS:
            return  # what is stored stays; the rest is decoded again each time
        arrays = _packed(stored, new)
        self._cache.store(self._key, arrays)
        self._stored = arrays

    def _load(self) -> Arrays:
        assert self._key is not None
        arrays = self._cache.load(self._key)
        if arrays is None:
            return _packed(None, {})
        if not _well_formed(arrays):
            self._cache.discard(self._key)
            return _packed(None, {})
        return arrays


def _packed(stored: Arrays | None, new: dict[int, LineColumns]) -> Arrays:
    """The stored programs and the new ones in one set of columns, programs sorted by offset."""
    if stored is None:
        stored = {name: np.zeros(0, dtype=dtype) for name, dtype in _COLUMNS + _INDEX}
    offsets = sorted(new)
    new_columns = {name: np.concatenate([np.asarray(new[o][i], dtype=dtype) for o in offsets]) if offsets
                   else np.zeros(0, dtype=dtype) for i, (name, dtype) in enumerate(_COLUMNS)}  # fmt: skip
    new_ends = np.cumsum([len(new[o].addresses) for o in offsets], dtype=np.int64)
    programs, ends, columns = packed.merged(
        stored["programs"], stored["program_ends"], {name: stored[name] for name, _ in _COLUMNS},
        np.array(offsets, dtype=np.uint64), new_ends, new_columns,
    )  # fmt: skip
    return {"programs": programs, "program_ends": ends, **columns}


def _well_formed(arrays: Arrays) -> bool:
    """Every column and index array is one-dimensional and of its dtype, the columns are of one length,
    and the programs' rows are packed (``packed.well_formed``)."""
    for name, dtype in _COLUMNS + _INDEX:
        column = arrays.get(name)
        if column is None or column.dtype != dtype or column.ndim != 1:
            return False
    lengths = {len(arrays[name]) for name, _ in _COLUMNS}
    return len(lengths) == 1 and packed.well_formed(arrays["programs"], arrays["program_ends"], lengths.pop())
