"""Known trampolines in file-less code (``profiler/unwind/trampolines.py``), checked against the bytes of
the trampolines as the interpreters here were built."""

from __future__ import annotations

import os
import struct

import pytest

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.model import DW_RA, DW_RBP, DW_RSP, NUM_DWARF_REGS
from profiler.unwind.cfi import step_cfi
from profiler.unwind.stack import StackWindow
from profiler.unwind.trampolines import AFTER, BEFORE, CPYTHON_PERF, recognise, rule_before
from tests.targets.python.interpreters import PYENV_ROOT

PYENV = PYENV_ROOT
LIBPYTHONS = [os.path.join(PYENV, "versions", v, "lib", f"libpython{v.rsplit('.', 1)[0]}.so.1.0")
              for v in ("3.12.1", "3.13.0")]  # fmt: skip


@pytest.mark.parametrize("path", LIBPYTHONS, ids=lambda p: os.path.basename(p))
def test_cpythons_perf_trampoline_is_recognised_at_its_return_address(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    elf = ElfFile(path)
    start, size = load_symbols(elf).address_of("_Py_trampoline_func_start")  # type: ignore[misc]
    code = elf.read_svma(start, 16)
    ra = 6  # after "sub $8,%rsp; call *%rcx"
    assert recognise(code[ra - BEFORE : ra + AFTER]) is CPYTHON_PERF
    assert all(recognise(code[at - BEFORE : at + AFTER]) is None for at in range(BEFORE, 16 - AFTER) if at != ra)


def test_other_code_is_not_a_trampoline():
    frame_pointer_variant = b"\x55\x48\x89\xe5\xff\xd1\x5d\xc3\x90\x90\x90"  # push rbp; mov rsp,rbp; call; pop
    assert recognise(frame_pointer_variant) is None
    assert recognise(b"\x48\x83\xec\x08\xff\xd2" + b"\x48\x83\xc4\x08\xc3") is None  # call *%rdx
    assert recognise(b"") is None


def test_the_byte_before_a_trampolines_return_address_has_its_fixed_frame_as_a_rule():
    """The unwinder looks a caller up one byte back, and memoizes what it finds there as it does a CFI
    row: the rule steps to the caller at rsp + 16, its return address at rsp + 8, every other register kept."""
    base = 0x7F0000001000
    code = CPYTHON_PERF.before + CPYTHON_PERF.after
    ra = base + len(CPYTHON_PERF.before)

    def read(addr: int, size: int) -> bytes:
        return code[addr - base : addr - base + size] if addr >= base else b""

    rule = rule_before(read, ra - 1)
    assert rule is not None and rule_before(read, ra) is None and rule_before(read, ra - 2) is None
    sp = 0x7FFD0000
    window = StackWindow(struct.pack("<4Q", 0, 0xAAAA, 0x5555_0000_1234, 0), sp, False)
    regs = [None] * NUM_DWARF_REGS
    regs[DW_RSP], regs[DW_RBP], regs[DW_RA] = sp + 8, 0x1234, ra
    caller = step_cfi(rule, regs, window)
    assert caller[DW_RSP] == sp + 24 and caller[DW_RA] == 0x5555_0000_1234 and caller[DW_RBP] == 0x1234
