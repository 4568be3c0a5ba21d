"""The on-disk cache of compiled unwind tables (issue 3, item 6): keyed by build-id, atomic writes,
versioned, and a corrupt entry is discarded and rebuilt, never trusted."""

from __future__ import annotations

import io
import multiprocessing
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from profiler.binary import cache as cache_module
from profiler.binary.cache import CACHE_VERSION, ENTRY_SUFFIX, TableCache, cache_key, default_cache_dir
from profiler.binary.cfi.snapshot import table_from_arrays, table_to_arrays
from profiler.binary.objfile import ObjectFileCache
from profiler.errors import BinaryError
from tests.support.cfi_builder import CfiBuilder, advance_loc, def_cfa, def_cfa_offset, offset
from tests.support.targets import build_c

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
CHAIN_C = Path(__file__).resolve().parents[1] / "targets" / "chain.c"


def small_table_arrays() -> dict[str, np.ndarray]:
    b = CfiBuilder()
    cie = b.cie(def_cfa(7, 8) + offset(16, 1))
    b.fde(cie, 0x1000, 0x40, advance_loc(1) + def_cfa_offset(16) + b"\x10\x03\x02\x77\x10")  # + expression
    b.fde(cie, 0x1100, 0x40, b"")
    table = b.table(hdr_svma=0x800)
    table.rule_for(0x1001)
    return table_to_arrays(table)


def test_default_location_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == str(tmp_path / "nprof")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid per the XDG spec: ignored
    assert default_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "nprof")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir().endswith(os.path.join(".cache", "nprof"))


def test_keys_use_the_build_id_else_path_size_and_mtime() -> None:
    assert cache_key("ABCDEF12", "/x", 1, 2) == "build-id-abcdef12"
    a, b = cache_key(None, "/lib/x.so", 100, 1), cache_key(None, "/lib/x.so", 100, 2)
    assert a.startswith("file-") and a != b


def test_round_trip_and_no_temporary_files_left(tmp_path: Path) -> None:
    cache = TableCache("cfi", str(tmp_path))
    arrays = small_table_arrays()
    assert cache.store("build-id-ab", arrays)
    assert os.listdir(cache.directory) == ["build-id-ab" + ENTRY_SUFFIX]
    assert cache.directory.endswith(f"cfi-v{CACHE_VERSION}")
    loaded = cache.load("build-id-ab")
    assert loaded is not None and set(loaded) == set(arrays)
    assert all(np.array_equal(loaded[k], arrays[k]) for k in arrays)
    assert cache.load("build-id-missing") is None and cache.stats.misses == 1


def test_version_mismatch_invalidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = TableCache("cfi", str(tmp_path))
    monkeypatch.setattr(cache_module, "CACHE_VERSION", CACHE_VERSION + 1)
    cache.store("k", small_table_arrays())  # written by a "newer" nprof into the same directory
    monkeypatch.setattr(cache_module, "CACHE_VERSION", CACHE_VERSION)
    assert cache.load("k") is None
    assert cache.stats.discarded == 1 and not os.path.exists(cache.path_for("k"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "pickle"])
def test_corrupt_entries_are_discarded(tmp_path: Path, damage: str) -> None:
    cache = TableCache("cfi", str(tmp_path))
    cache.store("k", small_table_arrays())
    path = Path(cache.path_for("k"))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        for at in range(200, len(data) - 200, 97):
            data[at] ^= 0x5A
    elif damage == "garbage":
        data = bytearray(b"not a zip file at all")
    else:
        archive = io.BytesIO()
        np.savez(archive, rows=np.array([{"a": 1}], dtype=object))  # a pickled object array, in a zip
        data = bytearray(archive.getvalue())
    path.write_bytes(bytes(data))
    assert cache.load("k") is None
    assert cache.stats.discarded == 1 and not path.exists()


def test_arrays_of_objects_are_never_stored(tmp_path: Path) -> None:
    """An entry holds numbers only: storing objects fails (counted), and nothing is written."""
    cache = TableCache("cfi", str(tmp_path))
    assert cache.store("k", {"rows": np.array([{"a": 1}], dtype=object)}) is False
    assert cache.stats.write_errors == 1 and not os.path.exists(cache.path_for("k"))


def test_out_of_range_contents_are_rejected_by_validation() -> None:
    b = CfiBuilder()
    b.fde(b.cie(def_cfa(7, 8) + offset(16, 1)), 0x1000, 0x40, b"")
    sources = b.table(hdr_svma=0x800).sources
    arrays = small_table_arrays()
    arrays["src0_slots"] = arrays["src0_slots"].copy()
    arrays["src0_slots"][0] = (0, 10_000, 0)  # a row slice past the end of the rows
    with pytest.raises(BinaryError):
        table_from_arrays(sources, arrays)
    arrays = small_table_arrays()
    arrays["rows"] = arrays["rows"].copy()
    arrays["rows"]["cfa_kind"][0] = 1  # an expression CFA ...
    arrays["rows"]["cfa_arg"][0] = 99  # ... whose expression does not exist
    with pytest.raises(BinaryError):
        table_from_arrays(sources, arrays)


def _writer(directory: str, fill: int) -> None:
    cache = TableCache("cfi", directory)
    for _ in range(30):
        cache.store("shared", {"payload": np.full(50_000, fill, dtype=np.int64)})


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path: Path) -> None:
    """Two nprof processes storing the same build-id while a third reads: every read is whole."""
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_writer, args=(str(tmp_path), fill)) for fill in (1, 2)]
    for w in writers:
        w.start()
    reader = TableCache("cfi", str(tmp_path))
    try:
        while any(w.is_alive() for w in writers):
            arrays = reader.load("shared")
            if arrays is not None:
                payload = arrays["payload"]
                assert len(payload) == 50_000 and len(set(payload[[0, -1]].tolist())) == 1
    finally:
        for w in writers:
            w.join(30)
    assert reader.stats.discarded == 0
    assert [n for n in os.listdir(reader.directory) if n != "shared" + ENTRY_SUFFIX] == []


def test_unwritable_cache_directory_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    cache = TableCache("cfi", str(blocker))
    assert cache.store("k", small_table_arrays()) is False and cache.stats.write_errors == 1


@pytest.mark.skipif(not os.path.exists(LIBC), reason="needs this machine's libc")
def test_warm_attach_restores_the_decoded_fdes(tmp_path: Path) -> None:
    cold = ObjectFileCache(TableCache("cfi", str(tmp_path)))
    obj = cold.open(LIBC, LIBC)
    pcs = [0x27282, 0x27445, 0x3C04F]
    rules = [obj.unwind_rule(pc) for pc in pcs]
    assert cold.save_unwind_tables() == 1
    assert cold.save_unwind_tables() == 0  # nothing new to save
    warm = ObjectFileCache(TableCache("cfi", str(tmp_path))).open(LIBC, LIBC)
    assert [warm.unwind_rule(pc) for pc in pcs] == rules
    table = warm.unwind_table
    assert table is not None and table.stats.decoded_fdes == 0  # every rule came from the cache


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_scanned_debug_frame_index_is_cached_and_a_corrupt_entry_rebuilt(tmp_path: Path) -> None:
    binary = Path(build_c(str(CHAIN_C), str(tmp_path), ["-O2", "-g", "-fno-asynchronous-unwind-tables"]))
    directory = str(tmp_path / "cache")
    obj = ObjectFileCache(TableCache("cfi", directory)).open(str(binary), str(binary))
    assert obj.unwind_table is not None
    entries = os.listdir(os.path.join(directory, f"cfi-v{CACHE_VERSION}"))
    assert len(entries) == 1  # stored at once: .debug_frame had to be scanned
    path = os.path.join(directory, f"cfi-v{CACHE_VERSION}", entries[0])
    Path(path).write_bytes(Path(path).read_bytes()[:100])
    fresh = ObjectFileCache(TableCache("cfi", directory))
    obj2 = fresh.open(str(binary), str(binary))
    assert obj2.unwind_table is not None and len(obj2.unwind_table) == len(obj.unwind_table)
    assert fresh.unwind_cache.stats.discarded == 1
    # rebuilt and stored again
    assert TableCache("cfi", directory).load(entries[0].removesuffix(ENTRY_SUFFIX)) is not None


def test_a_bad_fde_is_counted_again_after_a_restore() -> None:
    """A cached table must not hide corruption: an FDE that failed to decode is decoded (and counted)
    again in the next session rather than restored as silently empty."""
    b = CfiBuilder()
    cie = b.cie(def_cfa(7, 8) + offset(16, 1))
    b.fde(cie, 0x1000, 0x40, b"")
    b.fde(cie, 0x1100, 0x40, b"\x17")  # an opcode DWARF 5 (table 7.29) does not define: a corrupt program
    table = b.table(hdr_svma=0x800)
    assert table.rule_for(0x1001) is not None and table.rule_for(0x1101) is None
    assert table.stats.bad_fdes == 1
    restored = table_from_arrays(table.sources, table_to_arrays(table))
    assert restored.rule_for(0x1001) is not None
    assert restored.rule_for(0x1101) is None and restored.stats.bad_fdes == 1
