"""Decoded line tables kept on disk, so a line program is decoded once per file, not once per recording.

Decoding line programs is ~40% of the symbolization at the end of a recording: 0.4-0.55 s of 1.0-1.3 s
after 3 s of a Python program calling json, re, sqlite3 and xml (68-73 units of libpython, libc and
libsqlite3). What a program decodes to depends only on the bytes of ``.debug_line``, so:

* Key: a digest of the whole ``.debug_line`` section, and ``line_table.DECODER_VERSION``. A file changed
  after it was linked (strip, objcopy, damage) keeps its build-id but not its line programs, so the
  build-id alone would not do; a file without a build-id is cached all the same.
* Stored through ``TableCache("lines")`` (``binary/cache.py``: versioned, written atomically, numbers
  only): each program's four columns under its offset in ``.debug_line``. File names are not stored; the
  program's header, read each time, gives them.
* An entry whose columns do not have the decoder's types and one length each is discarded whole, and the
  programs are decoded again.
"""

from __future__ import annotations

import hashlib

import numpy as np

from profiler.binary.cache import Arrays, TableCache
from profiler.symbolize.line_table import DECODER_VERSION, LineColumns

#: the columns of a decoded program, in ``LineColumns`` order, with the dtype each must have
_COLUMNS = (("addresses", np.uint64), ("files", np.int64), ("lines", np.int64), ("ends", np.bool_))
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
            self._key = f"decoder-{DECODER_VERSION}-debug-line-{digest}"
        self._stored: Arrays | None = None
        self._new: Arrays = {}

    def get(self, offset: int) -> LineColumns | None:
        """The columns of the program at ``offset``, if stored."""
        if self._key is None:
            return None
        if self._stored is None:
            self._stored = self._load()
        names = [f"{offset:x}.{name}" for name, _ in _COLUMNS]
        if names[0] not in self._stored:
            return None
        return LineColumns(*(self._stored[name] for name in names))

    def put(self, offset: int, columns: LineColumns) -> None:
        if self._key is not None:
            for (name, _), column in zip(_COLUMNS, columns):
                self._new[f"{offset:x}.{name}"] = column

    def save(self) -> None:
        """Write the stored and the new programs together, if there are new ones."""
        if self._key is None or not self._new:
            return
        arrays = dict(self._stored if self._stored is not None else self._load())
        arrays.update(self._new)
        self._new = {}
        if sum(len(column) for name, column in arrays.items() if name.endswith(".ends")) > MAX_ROWS:
            return  # what is stored stays; the rest is decoded again each time
        self._cache.store(self._key, arrays)
        self._stored = arrays

    def _load(self) -> Arrays:
        assert self._key is not None
        arrays = self._cache.load(self._key) or {}
        if not _well_formed(arrays):
            self._cache.discard(self._key)
            return {}
        return arrays


def _well_formed(arrays: Arrays) -> bool:
    """Every program has its four columns, one-dimensional, of the decoder's dtypes and of one length."""
    offsets = {name.split(".", 1)[0] for name in arrays}
    for offset in offsets:
        length = None
        for name, dtype in _COLUMNS:
            column = arrays.get(f"{offset}.{name}")
            if column is None or column.dtype != dtype or column.ndim != 1:
                return False
            if length is not None and len(column) != length:
                return False
            length = len(column)
    return True
