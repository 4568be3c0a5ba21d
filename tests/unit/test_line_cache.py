"""Decoded line programs kept on disk (``profiler/symbolize/line_cache.py``): a second recording of a file
decodes none of the programs the first one did, and gets the same frames."""

from __future__ import annotations

import numpy as np

from profiler.binary.cache import TableCache
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
    [entry] = list((tmp_path / "lines-v1").iterdir())
    key = entry.name.removesuffix(".npz")
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
    assert not (tmp_path / "lines-v1").exists()


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
    [entry] = list((tmp_path / "lines-v1").iterdir())
    key = entry.name.removesuffix(".npz")
    arrays = cache.load(key)
    assert arrays
    arrays["program_ends"] = arrays["program_ends"] + 1
    cache.store(key, arrays)
    assert LineTableStore(b"section", cache).get(0x0) is None
    assert cache.stats.discarded == 1
