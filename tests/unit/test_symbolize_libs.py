"""DwarfResolver on real libraries, compared with addr2line at sampled addresses (fixed seeds):

* libpython3.12 (its own ``.debug_info``): 25 addresses inside ``_PyEval_EvalFrameDefault``, whose unit
  is the largest of the library, and 25 in random functions; every other pyenv libpython: 30 addresses;
* libc, through its separate debug file (zlib-compressed sections, DWARF 5 file tables where entry 1
  is not the primary file): 50 addresses in random functions.

The tolerated differences are those of test_symbolize_oracle.py. Libraries that are not installed are
skipped.
"""

from __future__ import annotations

import glob
import os
import random
import shutil

import pytest

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import SymbolTable, load_symbols
from profiler.symbolize.dwarf import DwarfResolver
from tests.targets.python.interpreters import PYENV_ROOT
from tests.unit.test_symbolize_oracle import addr2line, disagreement, llvm_symbolizer

PYENV = PYENV_ROOT
LIBPYTHON312 = f"{PYENV}/versions/3.12.1/lib/libpython3.12.so.1.0"
OTHER_LIBPYTHONS = sorted(p for p in glob.glob(f"{PYENV}/versions/3.*/lib/libpython3.*.so.1.0") if p != LIBPYTHON312)
LIBC_DEBUG = "/usr/lib/debug/.build-id/93/ac61ec5a8eb1396f9fbd350e3169a558528a40.debug"
SEED = 20261121

pytestmark = pytest.mark.skipif(shutil.which("addr2line") is None, reason="binutils is not installed")


def spread(symbols: SymbolTable, count: int, rng: random.Random) -> list[int]:
    """One address inside each of ``count`` random sized functions."""
    sized = [i for i in range(len(symbols)) if symbols.sizes[i] > 0]
    return [int(symbols.addrs[i]) + rng.randrange(int(symbols.sizes[i])) for i in rng.sample(sized, count)]


def check(path: str, addresses: list[int], symbols: SymbolTable) -> DwarfResolver:
    resolver = DwarfResolver(ElfFile(path), symbols)
    results = resolver.resolve(addresses)
    reference, second = addr2line(path, addresses), llvm_symbolizer(path, addresses)
    problems = [
        f"0x{address:x}: {why}"
        for address, frames in zip(addresses, results)
        if (why := disagreement(frames or [], reference[address], second.get(address)))
    ]
    assert not problems, "\n".join(problems[:10])
    assert resolver.notes == []
    return resolver


def loaded_symbols(path: str) -> SymbolTable:
    symbols = load_symbols(ElfFile(path))
    assert symbols is not None and len(symbols)
    return symbols


@pytest.mark.skipif(not os.path.exists(LIBPYTHON312), reason="pyenv CPython 3.12.1 is not installed")
def test_libpython312_matches_addr2line():
    symbols = loaded_symbols(LIBPYTHON312)
    rng = random.Random(SEED)
    start, size = symbols.address_of("_PyEval_EvalFrameDefault")  # type: ignore[misc]
    in_eval_loop = rng.sample(range(start, start + size), 25)
    resolver = check(LIBPYTHON312, in_eval_loop + spread(symbols, 25, rng), symbols)
    eval_frames = resolver.resolve(in_eval_loop)
    assert all(frames and frames[0].name == "_PyEval_EvalFrameDefault" for frames in eval_frames)
    assert any(len(frames or []) >= 3 for frames in eval_frames)  # inlined helpers (Py_INCREF, ...)
    assert resolver.units_loaded <= 26  # only the units of the sampled addresses were parsed


@pytest.mark.parametrize("path", OTHER_LIBPYTHONS, ids=lambda p: os.path.basename(p))
def test_other_libpythons_match_addr2line(path):
    symbols = loaded_symbols(path)
    check(path, spread(symbols, 30, random.Random(SEED)), symbols)


@pytest.mark.skipif(not os.path.exists(LIBC_DEBUG), reason="libc6-dbg is not installed")
def test_libc_through_its_debug_file_matches_addr2line():
    symbols = loaded_symbols(LIBC_DEBUG)
    addresses = spread(symbols, 50, random.Random(SEED))
    resolver = check(LIBC_DEBUG, addresses, symbols)
    assert resolver.units_loaded <= 50
