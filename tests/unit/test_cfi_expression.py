"""DWARF expressions as CFI uses them (DWARF 5 section 2.5; issue 3): the PLT's CFA, stack realignment,
and every operation class, over registers and a word reader only; and the registers an expression or a
compiled rule reads."""

from __future__ import annotations

import pytest

from profiler.binary.cfi import UnwindRule
from profiler.binary.cfi.expression import Unrecoverable, evaluate, registers_read
from profiler.binary.cfi.rules import (
    CFA_EXPRESSION,
    CFA_REGISTER,
    EXPRESSION,
    FAST,
    GENERIC,
    OFFSET,
    REGISTER,
    SAME_VALUE,
    registers_used,
)
from profiler.errors import BinaryError
from profiler.model import DW_RA, DW_RBP, DW_RSP, NUM_DWARF_REGS
from tests.support.cfi_builder import sleb, uleb

# The .plt CFA of every x86-64 ELF binary (binutils elf_x86_64_eh_frame_plt):
#   DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge;
#   DW_OP_lit3; DW_OP_shl; DW_OP_plus
PLT_CFA = bytes([0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])


def regs(**values: int) -> list[int | None]:
    names = {"rsp": DW_RSP, "rbp": DW_RBP, "rip": DW_RA}
    out: list[int | None] = [None] * NUM_DWARF_REGS
    for name, value in values.items():
        out[names[name]] = value
    return out


def no_memory(addr: int) -> int | None:
    return None


@pytest.mark.parametrize(
    ("rip", "cfa"),
    [
        (0x1020, 0x7000 + 8),  # at the stub's `jmp *GOT`: only the return address is pushed
        (0x102A, 0x7000 + 8),  # 0xa < 11
        (0x102B, 0x7000 + 16),  # after the stub's `push $index`: one more word
        (0x102F, 0x7000 + 16),
    ],
)
def test_plt_stub_cfa_expression(rip: int, cfa: int) -> None:
    assert evaluate(PLT_CFA, regs(rsp=0x7000, rip=rip), no_memory) == cfa


def test_stack_realignment_cfa_dereferences_the_saved_pointer() -> None:
    # main with `and $-16,%rsp`: DW_CFA_def_cfa_expression: DW_OP_breg6 (rbp) -8; DW_OP_deref
    memory = {0x7FF8: 0x8040}
    assert evaluate(bytes([0x76]) + sleb(-8) + b"\x06", regs(rbp=0x8000), memory.get) == 0x8040


def test_initial_stack_value_is_the_cfa() -> None:
    # DW_CFA_expression rules start with the CFA pushed: DW_OP_lit8; DW_OP_minus -> CFA - 8
    assert evaluate(b"\x38\x1c", regs(), no_memory, (0x9000,)) == 0x8FF8


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        (b"\x08\xff", 0xFF),  # DW_OP_const1u
        (b"\x09\xff", (1 << 64) - 1),  # DW_OP_const1s -1
        (b"\x0a\x34\x12", 0x1234),  # DW_OP_const2u
        (b"\x0d\xfe\xff\xff\xff", (1 << 64) - 2),  # DW_OP_const4s -2
        (b"\x0e" + (7).to_bytes(8, "little"), 7),  # DW_OP_const8u
        (b"\x10" + uleb(300), 300),  # DW_OP_constu
        (b"\x11" + sleb(-3) + b"\x19", 3),  # DW_OP_consts -3; DW_OP_abs
        (b"\x35\x36\x16\x1c", 1),  # lit5 lit6 swap minus -> 6 - 5
        (b"\x31\x32\x33\x17\x1c\x1c", 4),  # lit1 lit2 lit3 rot -> [3, 1, 2]; minus -> 3 - (1 - 2)
        (b"\x34\x12\x1e", 16),  # lit4 dup mul
        (b"\x34\x35\x14\x22\x22", 13),  # lit4 lit5 over plus plus -> 4+5+4
        (b"\x34\x35\x15\x01\x22\x22", 13),  # DW_OP_pick 1 is DW_OP_over
        (b"\x37\x32\x1b", 3),  # lit7 lit2 div
        (b"\x37\x32\x1d", 1),  # lit7 lit2 mod
        (b"\x35\x1f", (1 << 64) - 5),  # DW_OP_neg
        (b"\x30\x20", (1 << 64) - 1),  # DW_OP_not 0
        (b"\x31\x32\x21\x34\x27", 7),  # (1|2) ^ 4
        (b"\x3f\x32\x25", 3),  # 15 >> 2
        (b"\x30\x20\x3f\x26", (1 << 64) - 1),  # shra keeps the sign
        (b"\x31\x23" + uleb(9), 10),  # DW_OP_plus_uconst 9
        (b"\x31\x31\x29", 1),  # DW_OP_eq
        (b"\x31\x32\x2d", 1),  # DW_OP_lt
        (b"\x31\x32\x2c\x31\x32\x2e\x22", 2),  # le + ne
        (b"\x32\x31\x2b", 1),  # DW_OP_gt
        (b"\x31\x13\x35", 5),  # DW_OP_drop
        (b"\x96\x35", 5),  # DW_OP_nop
        (b"\x31\x28\x01\x00\x35\x37", 7),  # lit1; DW_OP_bra +1 (taken: skips lit5); lit7
        (b"\x30\x28\x01\x00\x35", 5),  # lit0; DW_OP_bra +1 (not taken); lit5
        (b"\x2f\x01\x00\x35\x36", 6),  # DW_OP_skip +1 over lit5; lit6
        (b"\x03" + (0x1234).to_bytes(8, "little"), 0x1234),  # DW_OP_addr
    ],
)
def test_operations(expr: bytes, value: int) -> None:
    assert evaluate(expr, regs(), no_memory) == value


def test_bregx_and_deref_size() -> None:
    memory = {0x5000: 0x1122334455667788}
    expr = b"\x92" + uleb(DW_RSP) + sleb(0x10) + b"\x94\x02"  # DW_OP_bregx rsp 16; DW_OP_deref_size 2
    assert evaluate(expr, regs(rsp=0x4FF0), memory.get) == 0x7788


def test_unknown_register_or_memory_is_unrecoverable() -> None:
    with pytest.raises(Unrecoverable):
        evaluate(b"\x76\x00", regs(), no_memory)  # DW_OP_breg6 with rbp unknown
    with pytest.raises(Unrecoverable):
        evaluate(b"\x77\x00\x06", regs(rsp=0x1000), no_memory)  # deref outside the stack copy
    with pytest.raises(Unrecoverable):
        evaluate(b"\x31\x30\x1b", regs(), no_memory)  # division by zero


@pytest.mark.parametrize(
    "expr",
    [
        b"\x2f\xfd\xff",  # DW_OP_skip -3: an endless loop, cut by MAX_OPS
        b"\x22",  # plus on an empty stack
        b"\x50",  # DW_OP_reg0: a location, not a value
        b"\xe0",  # DW_OP_GNU_push_tls_address: not for CFI
        b"\x2f\x00\x10",  # skip past the end
        b"\x0e\x01\x02",  # const8u truncated
        b"\x30" + b"\x12" * 70,  # dup past the stack bound
        b"",  # nothing on the stack
    ],
)
def test_malformed_expressions_raise_binary_error(expr: bytes) -> None:
    with pytest.raises(BinaryError):
        evaluate(expr, regs(rsp=0x1000), no_memory)


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        (PLT_CFA, {DW_RSP, DW_RA}),
        (bytes([0x76]) + sleb(-8) + b"\x06", {DW_RBP}),  # stack realignment
        (b"\x92" + uleb(3) + sleb(16), {3}),  # DW_OP_bregx rbx 16
        # operands that hold a breg's byte are skipped: DW_OP_const1u 0x73; DW_OP_constu 0x73; DW_OP_skip +0
        (b"\x08\x73" + b"\x10" + uleb(0x73) + b"\x2f\x00\x00", set()),
        (b"\x2f\x01\x00\x75\x00", {5}),  # a branch does not hide what it jumps over
        (b"\xff", None),  # an unknown operation: may read anything
        (b"\x77", None),  # truncated
    ],
)
def test_registers_an_expression_reads(expr: bytes, read: set[int] | None) -> None:
    assert registers_read(expr) == (None if read is None else frozenset(read))


def test_registers_a_rule_uses() -> None:
    """The CFA's base, registers copied or kept, and those expressions read; not the words at CFA + N."""
    fast = UnwindRule(FAST, DW_RBP, 16, -8, ((3, -24),), False, (CFA_REGISTER, DW_RBP, 16), ())
    assert registers_used(fast) == {DW_RBP}
    generic = UnwindRule(GENERIC, 0, 0, 0, (), False, (CFA_EXPRESSION, 0, PLT_CFA),
                         ((12, REGISTER, 5), (13, SAME_VALUE, 0), (14, OFFSET, -16)))  # fmt: skip
    assert registers_used(generic) == {DW_RSP, DW_RA, 5, 13}
    assert registers_used(generic._replace(registers=((3, EXPRESSION, b"\xff"),))) is None
