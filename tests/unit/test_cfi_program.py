"""Each DW_CFA instruction, from hand-assembled CIE/FDE bytes (DWARF 5 section 6.4.2; issue 3).

The CIE used by most tests is gcc's x86-64 one: ``DW_CFA_def_cfa rsp+8; DW_CFA_offset rip at cfa-8``,
code alignment 1, data alignment -8.
"""

from __future__ import annotations

import pytest

from profiler.binary.cfi.entries import FDE
from profiler.binary.cfi.program import decode_fde
from profiler.binary.cfi.rules import CfaKind, Row, RuleKind
from profiler.errors import BinaryError
from profiler.model import DW_R12, DW_RA, DW_RBP, DW_RBX, DW_RSP
from tests.support.cfi_builder import (
    CfiBuilder,
    advance_loc,
    def_cfa,
    def_cfa_offset,
    def_cfa_register,
    offset,
    restore,
    sleb,
    uleb,
)

START = 0x401000
GCC_CIE = def_cfa(DW_RSP, 8) + offset(DW_RA, 1)  # CFA = rsp+8; ra at cfa-8
RSP8: tuple[int, int, int] = (CfaKind.REGISTER, DW_RSP, 8)


def rows(fde_program: bytes, cie_program: bytes = GCC_CIE, size: int = 0x100, **cie: object) -> list[Row]:
    b = CfiBuilder()
    at = b.fde(b.cie(cie_program, **cie), START, size, fde_program)  # type: ignore[arg-type]
    return decode_fde(b.cfi_section().fde_at(at))


def only(fde_program: bytes, **cie: object) -> Row:
    (row,) = rows(fde_program, **cie)
    return row


# --- 6.4.2.1 row creation -------------------------------------------------------------------------------


def test_fde_without_instructions_has_the_cie_row() -> None:
    assert rows(b"") == [Row(START, RSP8, {DW_RA: (RuleKind.OFFSET, -8)})]


def test_advance_loc_forms_start_new_rows() -> None:
    program = (
        advance_loc(1) + def_cfa_offset(16)  # DW_CFA_advance_loc 1; def_cfa_offset 16 (after push)
        + b"\x02\x40" + def_cfa_offset(24)  # DW_CFA_advance_loc1 0x40
        + b"\x03\x00\x01" + def_cfa_offset(32)  # DW_CFA_advance_loc2 0x100
        + b"\x04\x00\x00\x01\x00" + def_cfa_offset(40)  # DW_CFA_advance_loc4 0x10000
    )  # fmt: skip
    got = [(r.start - START, r.cfa[2]) for r in rows(program, size=0x20000)]
    assert got == [(0, 8), (1, 16), (0x41, 24), (0x141, 32), (0x10141, 40)]


def test_advance_is_scaled_by_the_code_alignment_factor() -> None:
    got = rows(advance_loc(3) + def_cfa_offset(16), code_align=4)
    assert [r.start - START for r in got] == [0, 12]


def test_mips_advance_loc8() -> None:
    program = b"\x1d" + (5).to_bytes(8, "little") + def_cfa_offset(16)  # DW_CFA_MIPS_advance_loc8 5
    assert [r.start - START for r in rows(program)] == [0, 5]


def test_set_loc_with_the_fde_pointer_encoding() -> None:
    # DW_CFA_set_loc takes an address encoded like initial_location: absolute (DW_EH_PE_udata8) here
    program = b"\x01" + (START + 7).to_bytes(8, "little") + def_cfa_offset(16)
    got = rows(program, fde_encoding=0x04)
    assert [(r.start - START, r.cfa[2]) for r in got] == [(0, 8), (7, 16)]


def test_advance_by_zero_starts_no_row() -> None:
    assert len(rows(advance_loc(0) + def_cfa_offset(16))) == 1


def test_rows_past_the_end_of_the_fde_are_dropped() -> None:
    assert len(rows(advance_loc(0x20) + def_cfa_offset(16), size=0x10)) == 1


# --- 6.4.2.2 CFA definition -----------------------------------------------------------------------------


def test_def_cfa() -> None:
    assert only(def_cfa(DW_RBP, 16)).cfa == (CfaKind.REGISTER, DW_RBP, 16)


def test_def_cfa_sf_is_scaled_by_the_data_alignment_factor() -> None:
    # DW_CFA_def_cfa_sf rbp, -2 -> rbp + (-2 * -8); pyelftools 0.33 scales by the code factor here
    assert only(b"\x12" + uleb(DW_RBP) + sleb(-2)).cfa == (CfaKind.REGISTER, DW_RBP, 16)


def test_def_cfa_register_keeps_the_offset() -> None:
    assert only(def_cfa_offset(16) + def_cfa_register(DW_RBP)).cfa == (CfaKind.REGISTER, DW_RBP, 16)


def test_def_cfa_offset_sf() -> None:
    assert only(b"\x13" + sleb(-4)).cfa == (CfaKind.REGISTER, DW_RSP, 32)  # -4 * -8


def test_def_cfa_expression() -> None:
    expr = bytes([0x77, 0x08, 0x80, 0x00])  # DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0
    assert only(b"\x0f" + uleb(len(expr)) + expr).cfa == (CfaKind.EXPRESSION, 0, expr)


def test_offset_change_of_an_expression_cfa_is_corrupt() -> None:
    with pytest.raises(BinaryError):
        rows(b"\x0f\x01\x30" + def_cfa_offset(16))  # def_cfa_expression {DW_OP_lit0}; def_cfa_offset


# --- 6.4.2.3 register rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("program", "rule"),
    [
        (offset(DW_RBX, 2), (RuleKind.OFFSET, -16)),  # DW_CFA_offset rbx, 2
        (b"\x05" + uleb(DW_RBX) + uleb(3), (RuleKind.OFFSET, -24)),  # DW_CFA_offset_extended
        (b"\x11" + uleb(DW_RBX) + sleb(-1), (RuleKind.OFFSET, 8)),  # DW_CFA_offset_extended_sf
        (b"\x2f" + uleb(DW_RBX) + uleb(2), (RuleKind.OFFSET, 16)),  # DW_CFA_GNU_negative_offset_extended
        (b"\x14" + uleb(DW_RBX) + uleb(1), (RuleKind.VAL_OFFSET, -8)),  # DW_CFA_val_offset
        (b"\x15" + uleb(DW_RBX) + sleb(-1), (RuleKind.VAL_OFFSET, 8)),  # DW_CFA_val_offset_sf
        (b"\x07" + uleb(DW_RBX), (RuleKind.UNDEFINED, 0)),  # DW_CFA_undefined
        (b"\x08" + uleb(DW_RBX), (RuleKind.SAME_VALUE, 0)),  # DW_CFA_same_value
        (b"\x09" + uleb(DW_RBX) + uleb(DW_R12), (RuleKind.REGISTER, DW_R12)),  # DW_CFA_register rbx in r12
        (b"\x10" + uleb(DW_RBX) + b"\x02\x77\x10", (RuleKind.EXPRESSION, b"\x77\x10")),  # DW_CFA_expression
        (b"\x16" + uleb(DW_RBX) + b"\x01\x31", (RuleKind.VAL_EXPRESSION, b"\x31")),  # DW_CFA_val_expression
    ],
)
def test_register_rule(program: bytes, rule: tuple[int, object]) -> None:
    assert only(program).registers[DW_RBX] == rule


def test_restore_goes_back_to_the_cie_rule() -> None:
    program = offset(DW_RA, 2) + advance_loc(1) + restore(DW_RA)  # move ra, then DW_CFA_restore ra
    got = rows(program)
    assert got[0].registers[DW_RA] == (RuleKind.OFFSET, -16)
    assert got[1].registers[DW_RA] == (RuleKind.OFFSET, -8)


def test_restore_of_a_register_the_cie_does_not_describe_removes_its_rule() -> None:
    program = offset(DW_RBX, 2) + advance_loc(1) + b"\x06" + uleb(DW_RBX)  # DW_CFA_restore_extended rbx
    got = rows(program)
    assert DW_RBX in got[0].registers and DW_RBX not in got[1].registers


def test_remember_and_restore_state_include_the_cfa() -> None:
    # the glibc epilogue pattern: remember_state; def_cfa_offset 8 (after pop); ret; restore_state
    program = (
        def_cfa_offset(16) + offset(DW_RBX, 2)
        + advance_loc(4) + b"\x0a"  # DW_CFA_remember_state
        + def_cfa_offset(8) + restore(DW_RBX)
        + advance_loc(1) + b"\x0b"  # DW_CFA_restore_state
    )  # fmt: skip
    first, epilogue, body = rows(program)
    assert epilogue.cfa[2] == 8 and DW_RBX not in epilogue.registers
    assert body.cfa[2] == 16 and body.registers[DW_RBX] == (RuleKind.OFFSET, -16)
    assert body.start - START == 5


def test_gnu_args_size_and_nop_change_nothing() -> None:
    assert only(b"\x2e" + uleb(32) + b"\x00\x00") == only(b"")  # DW_CFA_GNU_args_size 32; DW_CFA_nop x2


def test_version_3_cie_reads_the_return_address_register_as_uleb128() -> None:
    assert only(b"", version=3, ra=16).registers[DW_RA] == (RuleKind.OFFSET, -8)


# --- malformed programs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "program",
    [
        b"\x0b",  # DW_CFA_restore_state without remember_state
        b"\x0a" * 65,  # remember_state nested past the bound
        b"\x3f",  # an opcode DWARF does not define
        b"\x2d",  # DW_CFA_GNU_window_save: SPARC/AArch64, not x86-64
        b"\x0c\x07",  # def_cfa missing its offset operand
        b"\x10\x03\x05\x77",  # DW_CFA_expression block longer than the FDE
        b"\x0e\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # LEB128 longer than 10 bytes
    ],
)
def test_corrupt_program_raises_binary_error(program: bytes) -> None:
    b = CfiBuilder()
    at = b.cie(GCC_CIE)
    cie = b.cfi_section().cie_at(at)
    with pytest.raises(BinaryError):
        decode_fde(FDE(0, cie, START, 0x100, program, 0))  # the program exactly, with no padding


def test_set_loc_backwards_is_corrupt() -> None:
    with pytest.raises(BinaryError):
        rows(advance_loc(4) + b"\x01" + START.to_bytes(8, "little"), fde_encoding=0x04)
