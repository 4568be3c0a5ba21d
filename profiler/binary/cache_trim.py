"""Keeping the on-disk table cache (``cache.py``) bounded: entries unused for a week are deleted, and the least
recently used go first while the cache is over its size limit.

Every entry is derived data (a compiled CFI table, a decoded line program) that nprof rebuilds on a miss, so
deleting one costs the next recording of that file its warm start and nothing else. Without trimming the
cache only grows: each library update, container image or Python version adds entries, and nothing reads an
entry again once its file is gone (a profiling daemon on a host that runs many images meets new ones daily).

* "Used" is an entry's mtime: ``TableCache`` sets it when it writes the entry and again whenever it loads
  it. (atime is not kept up to date on relatime and noatime mounts, the usual ones.)
* Trimming runs at most once per CLEAN_INTERVAL_S for a cache directory (the mtime of a stamp file in it),
  after a store; stores happen when a recording ends, so never in the sampling loop.
* Several nprof processes may trim one directory at once: a file already gone is not an error, and a reader
  that has an entry open keeps reading it after the unlink.
* What is trimmed: the entries of every table directory (``<kind>-v<N>``), of any format version, so an
  older nprof's entries age out like any other; and temporary files a killed writer left behind
  (``atomic.py`` names them ``.<name>.<random>.tmp``). Anything else there (the demo's build) is left alone.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

#: how often a cache directory is trimmed: debuginfod's client cache uses the same period for the same job
#: (``cache_clean_interval_s``, default 86400, in debuginfod_find_debuginfo(3))
CLEAN_INTERVAL_S = 86_400

#: entries not used for this long are deleted: debuginfod's ``max_unused_age_s`` default (604800, same page)
MAX_UNUSED_AGE_S = 604_800

#: the cache's size limit. A short recording of a Python program stores 4-6 MiB (measured from an empty
#: cache: pyenv's 3.12 4.3 MiB, Debian's 3.11 5.5 MiB; most of it the decoded line program of libpython or
#: of the python executable, 3.6 MiB, and 0.6-0.7 MiB of CFI tables), so this keeps ~100 such programs warm
MAX_BYTES = 512 * 1024 * 1024

#: a temporary file older than this is an orphan: writing an entry takes well under a second
STALE_TEMP_AGE_S = 3600

#: the stamp file whose mtime is the last trim's time
STAMP = "last-trim"

_TABLE_DIR = re.compile(r"[a-z]+-v[0-9]+")
#: entries' file names end so: ``cache.ENTRY_SUFFIX``, and ``.npz`` for an older nprof's ``np.savez`` entries
_ENTRY_SUFFIXES = (".tables", ".npz")


@dataclass
class TrimResult:
    removed: int = 0  #: entries and orphaned temporary files deleted
    freed_bytes: int = 0
    kept: int = 0  #: entries left
    kept_bytes: int = 0


def trim(root: str, now: float, max_bytes: int = MAX_BYTES, max_unused_age: float = MAX_UNUSED_AGE_S) -> TrimResult:
    """Delete, under ``root``, the entries unused since ``now - max_unused_age`` and orphaned temporary files,
    then the least recently used entries until the rest fit in ``max_bytes``."""
    result = TrimResult()
    entries: list[tuple[float, int, str]] = []  # (last used, size, path)
    for directory in _table_directories(root):
        try:
            listing = list(os.scandir(directory))
        except OSError:
            continue
        for item in listing:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue  # deleted meanwhile
            if item.name.endswith(".tmp") and item.name.startswith("."):
                if now - info.st_mtime > STALE_TEMP_AGE_S:
                    _remove(item.path, info.st_size, result)
            elif item.name.endswith(_ENTRY_SUFFIXES) and item.is_file(follow_symlinks=False):
                if now - info.st_mtime > max_unused_age:
                    _remove(item.path, info.st_size, result)
                else:
                    entries.append((info.st_mtime, info.st_size, item.path))
    entries.sort()
    total = sum(size for _, size, _ in entries)
    kept = len(entries)
    for _, size, path in entries:
        if total <= max_bytes:
            break
        _remove(path, size, result)
        total -= size
        kept -= 1
    result.kept, result.kept_bytes = kept, total
    return result


def trim_if_due(root: str, now: float | None = None) -> TrimResult | None:
    """``trim`` unless ``root`` was trimmed less than CLEAN_INTERVAL_S ago; None if it was not run (not due,
    or ``root`` cannot be written: then nobody can have added to it either)."""
    now = time.time() if now is None else now
    stamp = os.path.join(root, STAMP)
    try:
        if now - os.stat(stamp).st_mtime < CLEAN_INTERVAL_S:
            return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        with open(stamp, "ab"):
            pass
        os.utime(stamp, (now, now))  # first, so that processes ending at the same time do not all trim
    except OSError:
        return None
    return trim(root, now)


def mark_used(path: str) -> None:
    """Record that an entry was just read (its mtime), so that it is the last one the size limit deletes."""
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache (a shared or baked-in one) is still used; it is just not trimmed by use


def _table_directories(root: str) -> list[str]:
    try:
        return [item.path for item in os.scandir(root)
                if _TABLE_DIR.fullmatch(item.name) and item.is_dir(follow_symlinks=False)]  # fmt: skip
    except OSError:
        return []


def _remove(path: str, size: int, result: TrimResult) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # another nprof trimmed it first
    except OSError:
        return
    result.removed += 1
    result.freed_bytes += size
