"""An on-disk cache of compiled tables: named numpy arrays per file, keyed by build-id.

* Location: ``$XDG_CACHE_HOME/nprof``, else ``~/.cache/nprof`` (XDG Base Directory Specification 0.8).
* Key: the build-id (the same library in every container and every process is one entry); a file
  without one is keyed by its path, size and mtime.
* Versioned: entries live in a directory named after ``CACHE_VERSION`` and carry it inside, so a format
  change never reads an old entry.
* Writes are atomic (a temporary file in the same directory, then ``rename``), so concurrent nprof
  processes see either a whole entry or none.
* Entries are flat files of numbers (``_encode``): a magic, a JSON header naming each array's dtype,
  shape and place, the arrays' bytes, and a CRC32 of all of it, so a flipped bit is caught on load.
  No dtype holding Python objects is accepted: a cache file can hold numbers only, never code. Loading
  one is a read, a CRC and a view per array (why not ``np.savez``: docs/decisions/start-up-latency.md).
  Anything unreadable, of another version, or rejected by the caller's validation is deleted and
  counted, and the caller rebuilds.
* Not synced to disk: a torn entry after a crash fails its CRC and is rebuilt.
* Bounded: a load marks its entry used, and a store trims the cache (``cache_trim.py``) at most once a
  day: entries unused for a week go, and the least recently used while it holds more than 512 MiB.

Failing to write is never an error: the cache is an optimisation.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from profiler.atomic import atomic_write
from profiler.binary.cache_trim import mark_used, trim_if_due
from profiler.errors import NprofError

#: bump on any change to what an entry holds or means
CACHE_VERSION = 2
_VERSION_KEY = "_nprof_cache_version"
#: an entry's file name ends so (``cache_trim.py`` knows entries by it)
ENTRY_SUFFIX = ".tables"
#: an entry's first bytes; then the header's length and the CRC32 of everything after these 16 bytes
_MAGIC = b"nprof\x00tb"
_PREFIX = struct.Struct("<8sII")
#: each array's bytes start at a multiple of this (numpy's own allocation alignment)
_ALIGN = 64

Arrays = dict[str, npt.NDArray[np.generic]]


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):  # the spec says relative values are invalid and must be ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nprof")


def cache_key(build_id: str | None, path: str, size: int, mtime_ns: int) -> str:
    """A file name stem: the build-id, or a digest of path + size + mtime when there is none."""
    if build_id and all(c in "0123456789abcdef" for c in build_id.lower()):
        return f"build-id-{build_id.lower()}"
    digest = hashlib.sha256(os.fsencode(f"{path}\0{size}\0{mtime_ns}")).hexdigest()[:32]  # a path may not be UTF-8
    return f"file-{digest}"


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    discarded: int = 0  #: corrupt, of another version, or rejected by validation
    writes: int = 0
    write_errors: int = 0


class TableCache:
    """Named-array entries of one kind (``kind`` is a subdirectory, e.g. "cfi")."""

    def __init__(self, kind: str, directory: str | None = None, enabled: bool = True) -> None:
        root = directory if directory is not None else default_cache_dir()
        self.root = root  #: shared by every kind: trimmed as one (``cache_trim.py``)
        self.directory = os.path.join(root, f"{kind}-v{CACHE_VERSION}")
        self.enabled = enabled
        self.stats = CacheStats()

    def path_for(self, key: str) -> str:
        return os.path.join(self.directory, key + ENTRY_SUFFIX)

    def load(self, key: str) -> Arrays | None:
        """The arrays of an entry, or None (missing, or discarded because it is not trustworthy)."""
        if not self.enabled:
            return None
        path = self.path_for(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.stats.misses += 1
            return None
        except OSError:
            self.discard(key)
            return None
        arrays = _decode(data)
        if arrays is None:  # whatever is wrong with it, it is not trusted: rebuild
            self.discard(key)
            return None
        version = arrays.pop(_VERSION_KEY, None)
        if version is None or version.shape != () or int(version) != CACHE_VERSION:
            self.discard(key)
            return None
        self.stats.hits += 1
        mark_used(path)
        return arrays

    def discard(self, key: str) -> None:
        """Delete an entry the caller found invalid; it is rebuilt and stored again."""
        self.stats.discarded += 1
        try:
            os.unlink(self.path_for(key))
        except OSError:
            pass

    def store(self, key: str, arrays: Arrays) -> bool:
        """Write an entry atomically; False (and counted) if the cache directory is not writable. Then trim
        the cache if that is due (``cache_trim.py``): stores come at the end of a recording."""
        if not self.enabled:
            return False
        payload = dict(arrays)
        payload[_VERSION_KEY] = np.array(CACHE_VERSION, dtype=np.int64)
        try:
            os.makedirs(self.directory, exist_ok=True)
            data = _encode(payload)
            with atomic_write(self.path_for(key), durable=False) as f:
                f.write(data)
        except (OSError, NprofError, ValueError):
            self.stats.write_errors += 1
            return False
        self.stats.writes += 1
        trim_if_due(self.root)
        return True


def _encode(arrays: Arrays) -> bytes:
    """One entry's bytes (the module docstring); ValueError for a dtype holding objects."""
    header: list[list[Any]] = []
    parts: list[bytes] = []
    at = 0
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise ValueError(f"{name}: a cache entry holds numbers only")
        raw = np.ascontiguousarray(array).tobytes()
        pad = -at % _ALIGN
        parts.append(b"\0" * pad)
        at += pad
        header.append([name, np.lib.format.dtype_to_descr(array.dtype), list(array.shape), at, len(raw)])
        parts.append(raw)
        at += len(raw)
    text = orjson.dumps(header)
    text += b" " * (-(_PREFIX.size + len(text)) % _ALIGN)  # (the arrays start aligned in the file too)
    body = text + b"".join(parts)
    return _PREFIX.pack(_MAGIC, len(text), zlib.crc32(body)) + body


def _decode(data: bytes) -> Arrays | None:
    """The arrays of an entry's bytes (views of them), or None if they are not a whole, intact entry."""
    if len(data) < _PREFIX.size:
        return None
    magic, header_size, crc = _PREFIX.unpack_from(data)
    if magic != _MAGIC or zlib.crc32(memoryview(data)[_PREFIX.size :]) != crc:
        return None
    start = _PREFIX.size + header_size
    try:
        header = orjson.loads(data[_PREFIX.size : start])
        arrays: Arrays = {}
        for name, descr, shape, offset, size in header:
            dtype = np.lib.format.descr_to_dtype(_as_descr(descr))
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if dtype.hasobject or offset < 0 or size != count * dtype.itemsize or start + offset + size > len(data):
                return None
            arrays[str(name)] = np.frombuffer(data, dtype, count, start + offset).reshape(shape)
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError):
        return None
    return arrays


def _as_descr(descr: Any) -> Any:
    """A dtype description back from JSON, whose tuples became arrays: a record's fields are
    ``(name, type[, shape])``, a type a string or a record of its own, a shape a tuple of ints."""
    if not isinstance(descr, list):
        return descr
    fields = []
    for name, kind, *shape in descr:
        shape = [tuple(s) if isinstance(s, list) else s for s in shape]
        fields.append((name, _as_descr(kind), *shape))
    return fields
