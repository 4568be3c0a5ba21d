"""Differential test (issue 3): at >= 1000 addresses per library, our compiled table agrees with
``readelf --debug-dump=frames-interp`` on the CFA rule and on the rule of every register readelf shows.

Addresses are drawn with a fixed seed: half are row boundaries (where an off-by-one in advance_loc
would show), half uniform inside FDE ranges. Libraries: this machine's libc and the libpython of every
pyenv CPython; plus a gcc-built binary whose ``.debug_frame`` is compared the same way.
"""

from __future__ import annotations

import glob
import os
import random
import shutil
from pathlib import Path

import pytest

from profiler.binary.cfi.locate import debug_frame_source, find_cfi_sources
from profiler.binary.cfi.table import UnwindTable
from profiler.binary.elf import ElfFile
from tests.support.readelf_frames import ReadelfFrames, describe_row, normalize, read_frames
from tests.support.targets import build_c
from tests.targets.python.interpreters import PYENV_ROOT

SAMPLES = 1000
SEED = 20261121
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
PYENV = PYENV_ROOT
LIBPYTHONS = sorted(glob.glob(f"{PYENV}/versions/3.*/lib/libpython3.*.so.1.0"))
CHAIN_C = Path(__file__).resolve().parents[1] / "targets" / "chain.c"

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) is not installed")


def sample_addresses(frames: ReadelfFrames, rng: random.Random, n: int) -> list[tuple[int, int]]:
    """(fde index, address) pairs: n // 2 row starts and the rest uniform inside FDEs."""
    fdes = [i for i, f in enumerate(frames.fdes) if f.end > f.start]
    with_rows = [i for i in fdes if frames.fdes[i].rows]
    picks = []
    for k in range(n):
        if k % 2 == 0 and with_rows:
            i = rng.choice(with_rows)
            loc, _cells = rng.choice(frames.fdes[i].rows)
            picks.append((i, loc))
        else:
            i = rng.choice(fdes)
            picks.append((i, rng.randrange(frames.fdes[i].start, frames.fdes[i].end)))
    return picks


def compare(table: UnwindTable, frames: ReadelfFrames, n: int = SAMPLES) -> int:
    """Check n sampled addresses; returns how many were compared (addresses in two FDEs are skipped)."""
    starts = sorted((f.start, f.end) for f in frames.fdes)
    overlapping = {s for (s, e), (s2, _e2) in zip(starts, starts[1:]) if s2 < e}
    compared, mismatches = 0, []
    for i, addr in sample_addresses(frames, random.Random(SEED), n):
        fde = frames.fdes[i]
        expected = frames.expected_at(fde, addr)
        if expected is None or fde.start in overlapping:
            continue
        found = table.row_for(addr)
        got = describe_row(found[0]) if found is not None else {"CFA": "no row"}
        if got != normalize(expected):
            mismatches.append((hex(addr), normalize(expected), got))
        compared += 1
    assert not mismatches, f"{len(mismatches)} mismatches, e.g. {mismatches[:3]}"
    return compared


def eh_frame_table(path: str) -> UnwindTable:
    sources, notes = find_cfi_sources(ElfFile(path))
    eh = [s for s in sources if s.origin.endswith(".eh_frame")]
    assert eh and not notes, notes
    return UnwindTable(eh)


@pytest.mark.parametrize("path", [LIBC, *LIBPYTHONS], ids=lambda p: os.path.basename(p))
def test_eh_frame_agrees_with_readelf(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    table = eh_frame_table(path)
    assert compare(table, read_frames(path)) >= SAMPLES * 0.95
    assert table.stats.bad_fdes == 0, table.stats.errors


def test_libpython_is_present_for_the_differential_test() -> None:
    if not LIBPYTHONS:
        pytest.skip(f"no pyenv CPython under {PYENV}/versions")
    assert all(os.path.getsize(p) > 0 for p in LIBPYTHONS)


def test_debug_frame_agrees_with_readelf(tmp_path: Path) -> None:
    """gcc -fno-asynchronous-unwind-tables -g puts the CFI of every function in .debug_frame only."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    flags = ["-O2", "-g", "-fno-asynchronous-unwind-tables", "-fomit-frame-pointer"]
    binary = Path(build_c(str(CHAIN_C), str(tmp_path), flags, name="chain_debug_frame"))
    source = debug_frame_source(ElfFile(str(binary)))
    assert source is not None
    table = UnwindTable([source])
    frames = read_frames(str(binary), ".debug_frame")
    assert len(frames.fdes) >= 5
    assert compare(table, frames, n=200) >= 150
