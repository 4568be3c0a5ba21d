"""Decoded line programs kept on disk (``profiler/symbolize/line_cache.py``): a second recording of a file
decodes none of the programs the first one did, and gets the same frames. And each address's frames kept on
disk (``frame_store.py``): a second run reads no DWARF for the addresses the first resolved."""

from __future__ import annotations

import numpy as np

from profiler.binary.cache import CACHE_VERSION, ENTRY_SUFFIX, TableCache
from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.symbolize import line_table
from profiler.symbolize.dwarf import DwarfResolver
from profiler.symbolize.line_cache import LineTableStore


def function_addresses(path: str) -> list[int]:
    symbols = load_symbols(ElfFile(path))
    return [int(a) + 1 for a in symbols.addrs]  # one byte in: inside each function's first line


def test_a_second_resolver_reads_the_decoded_programs_back(chain_fp, tmp_path, monkeypatch):
    cache = TableCache("lines", str(tmp_path))
    addresses = function_addresses(chain_fp)
    first = DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(addresses)
    assert any(frames and frames[-1].line for frames in first), "the test binary has line numbers"
    assert cache.stats.writes == 1

    def no_decoding(*args: object) -> None:
        raise AssertionError("a stored line program was decoded again")

    monkeypatch.setattr(line_table, "decode_columns", no_decoding)
    again = DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(addresses)
    assert again == first
    assert cache.stats.writes == 1  # nothing new to store


def test_an_entry_of_the_wrong_shape_is_discarded_and_decoded_again(chain_fp, tmp_path):
    cache = TableCache("lines", str(tmp_path))
    addresses = function_addresses(chain_fp)
    first = DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(addresses)
    [entry] = list((tmp_path / f"lines-v{CACHE_VERSION}").iterdir())
    key = entry.name.removesuffix(ENTRY_SUFFIX)
    arrays = cache.load(key)
    assert arrays
    damaged = {name: column.astype(np.float64) if name == "lines" else column
               for name, column in arrays.items()}  # fmt: skip
    cache.store(key, damaged)
    again = DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(addresses)
    assert again == first
    assert cache.stats.discarded == 1


def test_a_disabled_cache_writes_nothing(chain_fp, tmp_path):
    cache = TableCache("lines", str(tmp_path), enabled=False)
    DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(function_addresses(chain_fp))
    assert not (tmp_path / f"lines-v{CACHE_VERSION}").exists()


def columns(base: int, rows: int) -> line_table.LineColumns:
    return line_table.LineColumns(
        np.arange(base, base + rows, dtype=np.uint64), np.ones(rows, dtype=np.int64),
        np.arange(1, rows + 1, dtype=np.int64), np.arange(rows) == rows - 1,
    )  # fmt: skip


def test_programs_of_later_recordings_join_the_entry(tmp_path):
    cache = TableCache("lines", str(tmp_path))
    section = b"a .debug_line section"
    store = LineTableStore(section, cache)
    store.put(0x40, columns(0x1000, 3))
    store.save()
    later = LineTableStore(section, cache)
    assert later.get(0x0) is None
    later.put(0x0, columns(0x2000, 2))
    later.put(0x80, columns(0x3000, 4))
    later.save()
    again = LineTableStore(section, cache)
    for offset, expected in ((0x0, columns(0x2000, 2)), (0x40, columns(0x1000, 3)), (0x80, columns(0x3000, 4))):
        got = again.get(offset)
        assert got is not None and all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert cache.stats.writes == 2


def test_program_bounds_past_the_rows_discard_the_entry(tmp_path):
    cache = TableCache("lines", str(tmp_path))
    store = LineTableStore(b"section", cache)
    store.put(0x0, columns(0x1000, 3))
    store.save()
    [entry] = list((tmp_path / f"lines-v{CACHE_VERSION}").iterdir())
    key = entry.name.removesuffix(ENTRY_SUFFIX)
    arrays = cache.load(key)
    assert arrays
    arrays["program_ends"] = arrays["program_ends"] + 1
    cache.store(key, arrays)
    assert LineTableStore(b"section", cache).get(0x0) is None
    assert cache.stats.discarded == 1


def test_a_second_resolver_reads_no_dwarf_for_addresses_the_first_resolved(chain_fp, tmp_path):
    """``frame_store.py``: a later run takes each address's frames from disk, and opens no debug section."""
    lines, frames = TableCache("lines", str(tmp_path)), TableCache("frames", str(tmp_path))
    addresses = function_addresses(chain_fp)
    first = DwarfResolver(ElfFile(chain_fp), line_cache=lines, frame_cache=frames).resolve(addresses)
    assert any(f and len(f) > 1 for f in first) or any(f and f[-1].line for f in first)
    assert frames.stats.writes == 1
    again = DwarfResolver(ElfFile(chain_fp), line_cache=lines, frame_cache=frames)
    assert again.resolve(addresses) == first
    assert again.units_loaded == 0 and again._sections is None, "no DWARF was read"
    assert frames.stats.writes == 1  # nothing new to store
    # an address not stored yet is resolved and joins the entry; the stored ones stay
    extra = [a + 1 for a in addresses[:3]]
    third = DwarfResolver(ElfFile(chain_fp), line_cache=lines, frame_cache=frames)
    assert third.resolve(addresses + extra)[: len(addresses)] == first
    assert frames.stats.writes == 2
    fourth = DwarfResolver(ElfFile(chain_fp), line_cache=lines, frame_cache=frames)
    assert fourth.resolve(extra) == third.resolve(extra) and fourth.units_loaded == 0


def test_a_frame_entry_that_does_not_fit_is_discarded_and_resolved_again(chain_fp, tmp_path):
    lines, frames = TableCache("lines", str(tmp_path)), TableCache("frames", str(tmp_path))
    addresses = function_addresses(chain_fp)
    first = DwarfResolver(ElfFile(chain_fp), line_cache=lines, frame_cache=frames).resolve(addresses)
    [entry] = list((tmp_path / f"frames-v{CACHE_VERSION}").iterdir())
    key = entry.name.removesuffix(ENTRY_SUFFIX)
    arrays = frames.load(key)
    assert arrays
    arrays["names"] = arrays["names"] + len(arrays["string_ends"])  # every name out of the string table
    frames.store(key, arrays)
    again = DwarfResolver(ElfFile(chain_fp), line_cache=lines, frame_cache=frames)
    assert again.resolve(addresses) == first
    assert frames.stats.discarded == 1 and again.units_loaded > 0


def test_a_file_changed_since_is_not_taken_for_the_stored_one(chain_fp, tmp_path):
    """The key holds the file's size and mtime: ``objcopy`` or ``strip`` keep the build-id."""
    import os
    import shutil

    copy = str(tmp_path / "chain")
    shutil.copy2(chain_fp, copy)
    frames = TableCache("frames", str(tmp_path))
    DwarfResolver(ElfFile(copy), frame_cache=frames).resolve(function_addresses(copy))
    os.utime(copy, ns=(0, 0))
    again = DwarfResolver(ElfFile(copy), frame_cache=frames)
    again.resolve(function_addresses(copy))
    assert again.units_loaded > 0 and frames.stats.writes == 2
