"""Corrupt or truncated CFI gives ``BinaryError`` or "no row", never another exception and never a hang
(issue 3, DESIGN.md section 5 "Never trust the target's bytes").

The inputs are libc's real ``.eh_frame`` and ``.eh_frame_hdr`` with bytes flipped or cut off, drawn with
a fixed seed, and a copy of libc.so.6 damaged the same way on disk.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from profiler.binary.cache import TableCache
from profiler.binary.cfi.columns import RowColumns
from profiler.binary.cfi.eh_frame_hdr import parse_eh_frame_hdr
from profiler.binary.cfi.entries import FDE, CfiSection
from profiler.binary.cfi.program import decode_fde
from profiler.binary.cfi.rules import compile_rule
from profiler.binary.cfi.table import CfiSource, UnwindTable
from profiler.binary.elf import ElfFile
from profiler.binary.objfile import ObjectFileCache
from profiler.errors import BinaryError
from profiler.model import DW_RA, DW_RSP
from profiler.unwind.cfi import step_cfi
from profiler.unwind.stack import StackWindow
from tests.support.cfi_builder import CfiBuilder, def_cfa, offset

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
pytestmark = pytest.mark.skipif(not os.path.exists(LIBC), reason="needs this machine's libc")


def libc_sections() -> tuple[bytes, int, bytes, int]:
    elf = ElfFile(LIBC)
    eh, hdr = elf.sections[".eh_frame"], elf.sections[".eh_frame_hdr"]
    eh_data, hdr_data = elf.section_data(".eh_frame"), elf.section_data(".eh_frame_hdr")
    return bytes(eh_data or b""), eh.sh_addr, bytes(hdr_data or b""), hdr.sh_addr


def damage(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    if rng.random() < 0.2:
        return bytes(out[: rng.randrange(len(out))])  # truncated
    for _ in range(rng.randint(1, 16)):
        at = rng.randrange(len(out))
        out[at] = rng.choice((0x00, 0xFF, 0x80, rng.randrange(256)))
    return bytes(out)


def lookups(table: UnwindTable, rng: random.Random, lo: int, hi: int, n: int = 40) -> None:
    for _ in range(n):
        rule = table.rule_for(rng.randrange(lo, hi))
        assert rule is None or rule.kind in (0, 1, 2)


@pytest.mark.parametrize("target", ["eh_frame", "eh_frame_hdr"])
def test_damaged_sections_give_binary_error_or_no_row(target: str) -> None:
    eh, eh_svma, hdr, hdr_svma = libc_sections()
    rng = random.Random(3)
    outcomes = {"ok": 0, "binary_error": 0}
    for _ in range(150):
        bad_eh = damage(eh, rng) if target == "eh_frame" else eh
        bad_hdr = damage(hdr, rng) if target == "eh_frame_hdr" else hdr
        try:
            section = CfiSection(bad_eh, eh_svma, True, "damaged")
            index = parse_eh_frame_hdr(bad_hdr, hdr_svma, eh_svma, len(bad_eh))
            table = UnwindTable([CfiSource(section, index if index is not None else section.scan(), "damaged")])
            lookups(table, rng, 0x26000, 0x1A0000)
            outcomes["ok"] += 1
        except BinaryError:
            outcomes["binary_error"] += 1
    assert outcomes["ok"] > 0  # most damage is local: the rest of the table keeps working


def test_scan_of_damaged_eh_frame_is_bounded_and_safe() -> None:
    eh, eh_svma, _hdr, _hdr_svma = libc_sections()
    rng = random.Random(4)
    for _ in range(40):
        try:
            index = CfiSection(damage(eh, rng), eh_svma, True, "damaged").scan()
            assert len(index) <= len(eh) // 8
        except BinaryError:
            pass


def test_damaged_copy_of_libc_falls_back_without_crashing(tmp_path: Path) -> None:
    copy = tmp_path / "libc.so.6"
    shutil.copy(LIBC, copy)
    elf = ElfFile(LIBC)
    eh = elf.sections[".eh_frame"]
    data = bytearray(copy.read_bytes())
    rng = random.Random(5)
    for _ in range(64):
        data[eh.sh_offset + rng.randrange(eh.sh_size)] ^= 0xFF
    copy.write_bytes(bytes(data))
    cache = ObjectFileCache(TableCache("cfi", str(tmp_path / "cache")))
    obj = cache.open(str(copy), str(copy))
    for _ in range(500):
        obj.unwind_rule(rng.randrange(0x26000, 0x1A0000))
    table = obj.unwind_table
    assert table is None or table.stats.bad_fdes >= 0


def test_truncated_copy_of_libc_has_no_unwind_table(tmp_path: Path) -> None:
    """The file ends inside .eh_frame: the section cannot be read, so the module has no CFI."""
    elf = ElfFile(LIBC)
    eh = elf.sections[".eh_frame"]
    copy = tmp_path / "libc.so.6"
    copy.write_bytes(Path(LIBC).read_bytes()[: eh.sh_offset + eh.sh_size // 2])
    try:
        obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(str(copy), str(copy))
    except BinaryError:
        return  # pyelftools already refuses the headers: the module is skipped as a whole
    assert obj.unwind_rule(0x27282) is None
    assert obj.unwind_notes


def test_random_cfa_programs_decode_compile_and_step_safely() -> None:
    """Random instruction streams biased toward real opcodes: BinaryError or rows that evaluate safely."""
    b = CfiBuilder()
    at = b.cie(def_cfa(DW_RSP, 8) + offset(DW_RA, 1))
    cie = b.cfi_section().cie_at(at)
    rng = random.Random(11)
    window = StackWindow(bytes(rng.randrange(256) for _ in range(4096)), 0x7000, True)
    opcodes = [0x40, 0x80, 0xC0, *range(0x00, 0x17), 0x1D, 0x2E, 0x2F]
    decoded = 0
    for _ in range(3000):
        program = bytearray()
        for _ in range(rng.randint(1, 10)):
            op = rng.choice(opcodes)
            program.append(op | rng.randrange(64) if op in (0x40, 0x80, 0xC0) else op)
            program += bytes(rng.randrange(256) if rng.random() < 0.3 else rng.randrange(20) for _ in range(4))
        try:
            rows = decode_fde(FDE(0, cie, 0x1000, rng.randint(0, 0x200), bytes(program), 0))
        except BinaryError:
            continue
        columns = RowColumns()
        lo, hi = columns.append(rows, rng.random() < 0.1)
        for j in range(lo, hi):
            regs = [rng.choice([None, rng.randrange(0x7000, 0x8000), rng.randrange(1 << 64)]) for _ in range(17)]
            step_cfi(compile_rule(*columns.row(j)), regs, window)
        decoded += 1
    assert decoded > 300  # enough valid programs reached the compiler and the unwinder
