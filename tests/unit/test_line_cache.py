"""Decoded line programs kept on disk (``profiler/symbolize/line_cache.py``): a second recording of a file
decodes none of the programs the first one did, and gets the same frames."""

from __future__ import annotations

import numpy as np

from profiler.binary.cache import TableCache
from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.symbolize import line_table
from profiler.symbolize.dwarf import DwarfResolver


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
    damaged = {name: column.astype(np.float64) if name.endswith(".lines") else column
               for name, column in arrays.items()}  # fmt: skip
    cache.store(key, damaged)
    again = DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(addresses)
    assert again == first
    assert cache.stats.discarded == 1


def test_a_disabled_cache_writes_nothing(chain_fp, tmp_path):
    cache = TableCache("lines", str(tmp_path), enabled=False)
    DwarfResolver(ElfFile(chain_fp), line_cache=cache).resolve(function_addresses(chain_fp))
    assert not (tmp_path / "lines-v1").exists()
