"""An on-disk cache of compiled tables: named numpy arrays per file, keyed by build-id.

* Location: ``$XDG_CACHE_HOME/nprof``, else ``~/.cache/nprof`` (XDG Base Directory Specification 0.8).
* Key: the build-id (the same library in every container and every process is one entry); a file
  without one is keyed by its path, size and mtime.
* Versioned: entries live in a directory named after ``CACHE_VERSION`` and carry it inside, so a format
  change never reads an old entry.
* Writes are atomic (a temporary file in the same directory, then ``rename``), so concurrent nprof
  processes see either a whole entry or none.
* Entries are ``np.savez`` archives loaded with ``allow_pickle=False``: a cache file can hold numbers
  only, never code. The zip format checks each member's CRC32, so a flipped bit is caught on load.
  Anything unreadable, of another version, or rejected by the caller's validation is deleted and
  counted, and the caller rebuilds.
* Bounded: a load marks its entry used, and a store trims the cache (``cache_trim.py``) at most once a
  day: entries unused for a week go, and the least recently used while it holds more than 512 MiB.

Failing to write is never an error: the cache is an optimisation.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profiler.atomic import atomic_write
from profiler.binary.cache_trim import mark_used, trim_if_due
from profiler.errors import NprofError

#: bump on any change to what an entry holds or means
CACHE_VERSION = 1
_VERSION_KEY = "_nprof_cache_version"

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
        return os.path.join(self.directory, key + ".npz")

    def load(self, key: str) -> Arrays | None:
        """The arrays of an entry, or None (missing, or discarded because it is not trustworthy)."""
        if not self.enabled:
            return None
        path = self.path_for(key)
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {name: archive[name] for name in archive.files}
        except FileNotFoundError:
            self.stats.misses += 1
            return None
        except Exception:  # whatever a damaged archive raises, it is not trusted: rebuild
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
            with atomic_write(self.path_for(key)) as f:
                np.savez(f, **payload)  # type: ignore[arg-type]
        except (OSError, NprofError, ValueError):
            self.stats.write_errors += 1
            return False
        self.stats.writes += 1
        trim_if_due(self.root)
        return True
