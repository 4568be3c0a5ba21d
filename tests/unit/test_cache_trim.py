"""The on-disk table cache stays bounded (``profiler/binary/cache_trim.py``): entries unused for a week are
deleted, the least recently used go first over the size limit, a load counts as a use, trimming runs at most
once a day, and nothing but table entries and orphaned temporary files is ever deleted."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from profiler.binary.cache import TableCache
from profiler.binary.cache_trim import CLEAN_INTERVAL_S, MAX_UNUSED_AGE_S, STAMP, trim, trim_if_due

NOW = 2_000_000_000.0
DAY = 86_400.0


def entry(path: Path, size: int, last_used: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    os.utime(path, (last_used, last_used))
    return path


def test_entries_unused_for_a_week_are_deleted_in_every_table_directory(tmp_path: Path) -> None:
    old = entry(tmp_path / "cfi-v1" / "build-id-aa.npz", 100, NOW - MAX_UNUSED_AGE_S - DAY)
    old_version = entry(tmp_path / "cfi-v0" / "build-id-aa.npz", 100, NOW - MAX_UNUSED_AGE_S - 1)
    recent = entry(tmp_path / "lines-v1" / "decoder-1-x.npz", 100, NOW - MAX_UNUSED_AGE_S + DAY)
    result = trim(str(tmp_path), NOW)
    assert not old.exists() and not old_version.exists() and recent.exists()
    assert (result.removed, result.freed_bytes, result.kept, result.kept_bytes) == (2, 200, 1, 100)


def test_over_the_limit_the_least_recently_used_go_first(tmp_path: Path) -> None:
    paths = [entry(tmp_path / "cfi-v1" / f"e{i}.npz", 1000, NOW - (10 - i) * 60) for i in range(10)]
    result = trim(str(tmp_path), NOW, max_bytes=3500)
    assert [p.exists() for p in paths] == [False] * 7 + [True] * 3
    assert result.kept_bytes == 3000 and result.removed == 7


def test_only_table_entries_and_orphaned_temporary_files_are_deleted(tmp_path: Path) -> None:
    ancient = NOW - 10 * MAX_UNUSED_AGE_S
    others = [
        entry(tmp_path / "demo" / "abc" / "nprof-demo", 10, ancient),  # the demo's build
        entry(tmp_path / "cfi-v1" / "notes.txt", 10, ancient),
        entry(tmp_path / "unrelated.npz", 10, ancient),
        entry(tmp_path / "cfi-v1" / ".build-id-aa.npz.x1y2.tmp", 10, NOW - 60),  # a write under way
    ]
    orphan = entry(tmp_path / "cfi-v1" / ".build-id-bb.npz.k9z8.tmp", 10, NOW - 2 * 3600)
    trim(str(tmp_path), NOW, max_bytes=0)
    assert all(p.exists() for p in others) and not orphan.exists()


def test_a_missing_or_unreadable_root_is_not_an_error(tmp_path: Path) -> None:
    assert trim(str(tmp_path / "missing"), NOW).removed == 0
    assert trim_if_due(str(tmp_path / "missing"), NOW) is None  # cannot write its stamp: nothing to trim


def test_trimming_runs_at_most_once_per_interval(tmp_path: Path) -> None:
    stale = tmp_path / "cfi-v1" / "old.npz"
    entry(stale, 10, NOW - 2 * MAX_UNUSED_AGE_S)
    assert trim_if_due(str(tmp_path), NOW) is not None and not stale.exists()
    assert os.stat(tmp_path / STAMP).st_mtime == NOW
    entry(stale, 10, NOW - 2 * MAX_UNUSED_AGE_S)
    assert trim_if_due(str(tmp_path), NOW + CLEAN_INTERVAL_S - 1) is None and stale.exists()
    assert trim_if_due(str(tmp_path), NOW + CLEAN_INTERVAL_S + 1) is not None and not stale.exists()


def test_a_load_marks_the_entry_used_and_a_store_trims(tmp_path: Path) -> None:
    cache = TableCache("cfi", str(tmp_path))
    assert cache.store("build-id-aa", {"x": np.arange(4)})
    path = cache.path_for("build-id-aa")
    week_ago = time.time() - MAX_UNUSED_AGE_S - DAY
    os.utime(path, (week_ago, week_ago))
    assert cache.load("build-id-aa") is not None
    assert time.time() - os.stat(path).st_mtime < 60  # used now: the trim below keeps it

    stale = entry(tmp_path / "lines-v1" / "decoder-1-old.npz", 10, week_ago)
    os.utime(tmp_path / STAMP, (week_ago, week_ago))  # the last trim was a week ago: the next store trims
    assert cache.store("build-id-bb", {"x": np.arange(4)})
    assert not stale.exists() and os.path.exists(path) and os.path.exists(cache.path_for("build-id-bb"))

