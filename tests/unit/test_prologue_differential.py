"""Differential test: prologue analysis (binary/prologue.py), the unwinder's guide for code without CFI,
against the CFI of code that has it. At every instruction of the functions of this machine's libc and of
CPython 3.12's libpython, where the CFI puts the canonical frame address at rsp + N (or at rbp + 16 with
rbp set up as a frame pointer), the sweep's answer must say the same.

Left out: the ``.cold`` parts of split functions (entered mid-frame from their hot part, so a sweep from
their start cannot know the frame), alignment padding (never executed), and instructions where the sweep
answers "unknown" or relative to another register (nothing to compare).
"""

from __future__ import annotations

import os

import capstone
import pytest

from profiler.binary.objfile import MAX_SWEEP_BYTES, ObjectFileCache
from profiler.binary.prologue import FRAME_SET, FunctionLayout
from profiler.model import DW_RBP, DW_RSP
from tests.targets.python.interpreters import PYENV_ROOT

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
LIBPYTHON = f"{PYENV_ROOT}/versions/3.12.1/lib/libpython3.12.so.1.0"
#: the share of instructions that must agree: 99.8% (libc) and 99.5% (libpython) measured when the sweep
#: learnt to take a block's state from the branches to it, 97.3% and 96.2% before
AGREEMENT = 0.99
#: a sweep of every instruction of two whole system libraries (15 s): out of the pure tests' quick run
pytestmark = pytest.mark.ptrace


def agreement(path: str) -> tuple[int, int]:
    """(instructions where the sweep agrees with the CFI, instructions compared)."""
    obj = ObjectFileCache().open(path)
    symbols = obj.symbols
    assert symbols is not None, f"{path} has no symbols"
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    agree = compared = 0
    seen: set[int] = set()
    for name in symbols.function_names():
        hit = symbols.address_of(name)
        if hit is None or ".cold" in name or hit[0] in seen or not 0 < hit[1] <= MAX_SWEEP_BYTES:
            continue
        seen.add(hit[0])
        code = obj.elf.read_svma(hit[0], hit[1])
        layout = FunctionLayout(code, hit[0])
        for addr, _size, mnemonic, _ops in md.disasm_lite(code, hit[0]):
            rule = obj.unwind_rule(addr)
            state = layout.state_at(addr)
            if rule is None or state is None or state.base is not None or mnemonic.startswith("nop"):
                continue
            if state.ra_offset == FRAME_SET:
                same = (rule.cfa_register, rule.cfa_offset) == (DW_RBP, 16)
            elif rule.cfa_register == DW_RSP:
                same = rule.cfa_offset - 8 == state.ra_offset
            else:
                continue
            agree += same
            compared += 1
    return agree, compared


@pytest.mark.parametrize("path", [LIBC, LIBPYTHON], ids=os.path.basename)
def test_prologue_analysis_agrees_with_the_cfi(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    agree, compared = agreement(path)
    assert compared > 100_000 and agree / compared >= AGREEMENT, f"{agree}/{compared} agree"
