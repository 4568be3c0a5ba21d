"""The CFA program interpreter: a CIE's initial instructions plus an FDE's instructions -> table rows.

DWARF 5 section 6.4.2 ("Call Frame Instructions") defines each opcode; the encodings are DWARF 5
table 7.29, and the GNU extensions are from binutils ``include/dwarf2.def``. Every opcode found in the
x86-64 binaries of this machine (libc, libstdc++, ld.so, CPython 3.6-3.13) is handled, plus the rest of
the standard set.

Why not pyelftools' ``FDE.get_decoded()`` (0.33): it raises ``ValueError`` on ``DW_CFA_GNU_args_size``
(libc's FDE at 0x100d80 has it), scales ``DW_CFA_def_cfa_sf`` by the code instead of the data alignment
factor, lets ``restore_state`` on an empty stack escape as ``IndexError``, and deep-copies the row on
every ``remember_state``; with its construct-based entry parsing an FDE costs 130-520 us
(``benchmarks/bench_cfi.py``), against 30-60 us here including the compilation into columns. This
interpreter raises only ``BinaryError``, and its loop is bounded by the instruction bytes: every opcode
consumes at least one byte.
"""

from __future__ import annotations

from profiler.binary.cfi.encoding import ByteReader, PointerBases
from profiler.binary.cfi.entries import CIE, FDE
from profiler.binary.cfi.rules import (
    CFA_EXPRESSION,
    CFA_REGISTER,
    CFA_UNDEFINED,
    EXPRESSION,
    OFFSET,
    SAME_VALUE,
    UNDEFINED,
    VAL_EXPRESSION,
    VAL_OFFSET,
    CfaRule,
    RegisterRule,
    Row,
)
from profiler.binary.cfi.rules import REGISTER as RULE_REGISTER
from profiler.errors import BinaryError

# DWARF 5 table 7.29: the high two bits of an opcode byte carry three instructions with an operand in
# the low six bits; the rest are whole-byte opcodes.
DW_CFA_advance_loc = 0x40
DW_CFA_offset = 0x80
DW_CFA_restore = 0xC0
DW_CFA_nop = 0x00
DW_CFA_set_loc = 0x01
DW_CFA_advance_loc1 = 0x02
DW_CFA_advance_loc2 = 0x03
DW_CFA_advance_loc4 = 0x04
DW_CFA_offset_extended = 0x05
DW_CFA_restore_extended = 0x06
DW_CFA_undefined = 0x07
DW_CFA_same_value = 0x08
DW_CFA_register = 0x09
DW_CFA_remember_state = 0x0A
DW_CFA_restore_state = 0x0B
DW_CFA_def_cfa = 0x0C
DW_CFA_def_cfa_register = 0x0D
DW_CFA_def_cfa_offset = 0x0E
DW_CFA_def_cfa_expression = 0x0F
DW_CFA_expression = 0x10
DW_CFA_offset_extended_sf = 0x11
DW_CFA_def_cfa_sf = 0x12
DW_CFA_def_cfa_offset_sf = 0x13
DW_CFA_val_offset = 0x14
DW_CFA_val_offset_sf = 0x15
DW_CFA_val_expression = 0x16
DW_CFA_MIPS_advance_loc8 = 0x1D  # binutils dwarf2.def
DW_CFA_GNU_args_size = 0x2E  # binutils dwarf2.def: bytes of outgoing arguments, for exception handling
DW_CFA_GNU_negative_offset_extended = 0x2F  # binutils dwarf2.def: obsolete form of offset_extended_sf

#: remember_state nesting allowed; compilers use one or two levels
MAX_STATE_STACK = 64

_NO_CFA: CfaRule = (CFA_UNDEFINED, 0, 0)


class _State:
    """The row being built: the CFA rule and the register rules, plus the remember_state stack."""

    __slots__ = ("cfa", "regs", "stack")

    def __init__(self, cfa: CfaRule, regs: dict[int, RegisterRule]) -> None:
        self.cfa = cfa
        self.regs = regs
        self.stack: list[tuple[CfaRule, dict[int, RegisterRule]]] = []


def initial_state(cie: CIE) -> tuple[CfaRule, dict[int, RegisterRule]]:
    """The row a CIE's initial instructions define: the start of every FDE that uses it."""
    state = _State(_NO_CFA, {})
    _run(cie.initial_instructions, cie, state, None, None, 0, PointerBases(0))
    return state.cfa, state.regs


def decode_fde(fde: FDE, initial: tuple[CfaRule, dict[int, RegisterRule]] | None = None) -> list[Row]:
    """The rows of an FDE, in address order, each starting inside ``[initial_location, end)``."""
    cfa, regs = initial if initial is not None else initial_state(fde.cie)
    state = _State(cfa, dict(regs))
    rows: list[Row] = []
    bases = PointerBases(fde.instructions_svma)
    loc = _run(fde.instructions, fde.cie, state, rows, regs, fde.initial_location, bases)
    rows.append(Row(loc, state.cfa, state.regs))
    return [row for row in rows if row.start < fde.end]


def _run(
    code: bytes,
    cie: CIE,
    state: _State,
    rows: list[Row] | None,
    cie_regs: dict[int, RegisterRule] | None,
    loc: int,
    bases: PointerBases,
) -> int:
    """Execute ``code``; emit a row into ``rows`` before each advance. Returns the final location.

    ``rows`` is None for a CIE's initial instructions, where advances only move ``loc``;
    ``cie_regs`` (the CIE's rules) is what ``DW_CFA_restore`` goes back to.
    """
    r = ByteReader(code, what="CFA program")
    caf, daf = cie.code_alignment_factor, cie.data_alignment_factor
    regs = state.regs
    end = r.end
    while r.pos < end:
        op = code[r.pos]
        r.pos += 1
        high, low = op & 0xC0, op & 0x3F
        if high == DW_CFA_advance_loc or DW_CFA_advance_loc1 <= op <= DW_CFA_advance_loc4:
            delta = low if high else (r.u8() if op == 2 else r.u16() if op == 3 else r.u32())
            loc = _advance(state, rows, loc, loc + delta * caf)
        elif high == DW_CFA_offset:
            regs[low] = (OFFSET, r.uleb128() * daf)
        elif high == DW_CFA_restore:
            _restore(regs, cie_regs, low)
        elif op == DW_CFA_def_cfa_offset:
            state.cfa = _with_offset(state.cfa, r.uleb128())
        elif op == DW_CFA_nop:
            pass
        elif op == DW_CFA_remember_state:
            if len(state.stack) >= MAX_STATE_STACK:
                raise BinaryError(f"CFA program: remember_state nested deeper than {MAX_STATE_STACK}")
            state.stack.append((state.cfa, dict(regs)))
        elif op == DW_CFA_restore_state:
            if not state.stack:
                raise BinaryError("CFA program: restore_state without remember_state")
            state.cfa, saved = state.stack.pop()
            regs.clear()
            regs.update(saved)
        else:
            loc = _run_rare(op, r, state, rows, cie, cie_regs, loc, bases)
    return loc


def _run_rare(
    op: int,
    r: ByteReader,
    state: _State,
    rows: list[Row] | None,
    cie: CIE,
    cie_regs: dict[int, RegisterRule] | None,
    loc: int,
    bases: PointerBases,
) -> int:
    """Opcodes outside the common prologue/epilogue set."""
    regs, daf = state.regs, cie.data_alignment_factor
    if op == DW_CFA_def_cfa:
        state.cfa = (CFA_REGISTER, r.uleb128(), r.uleb128())
    elif op == DW_CFA_def_cfa_sf:
        state.cfa = (CFA_REGISTER, r.uleb128(), r.sleb128() * daf)
    elif op == DW_CFA_def_cfa_register:
        if state.cfa[0] != CFA_REGISTER:
            raise BinaryError("CFA program: def_cfa_register while the CFA is not register-based")
        state.cfa = (CFA_REGISTER, r.uleb128(), state.cfa[2])
    elif op == DW_CFA_def_cfa_offset_sf:
        state.cfa = _with_offset(state.cfa, r.sleb128() * daf)
    elif op == DW_CFA_def_cfa_expression:
        state.cfa = (CFA_EXPRESSION, 0, r.bytes(r.uleb128()))
    elif op in (DW_CFA_offset_extended, DW_CFA_val_offset):
        kind = OFFSET if op == DW_CFA_offset_extended else VAL_OFFSET
        reg = r.uleb128()
        regs[reg] = (kind, r.uleb128() * daf)
    elif op in (DW_CFA_offset_extended_sf, DW_CFA_val_offset_sf):
        kind = OFFSET if op == DW_CFA_offset_extended_sf else VAL_OFFSET
        reg = r.uleb128()
        regs[reg] = (kind, r.sleb128() * daf)
    elif op == DW_CFA_GNU_negative_offset_extended:
        reg = r.uleb128()
        regs[reg] = (OFFSET, -r.uleb128() * daf)
    elif op == DW_CFA_restore_extended:
        _restore(regs, cie_regs, r.uleb128())
    elif op in (DW_CFA_undefined, DW_CFA_same_value):
        regs[r.uleb128()] = (UNDEFINED if op == DW_CFA_undefined else SAME_VALUE, 0)
    elif op == DW_CFA_register:
        reg = r.uleb128()
        regs[reg] = (RULE_REGISTER, r.uleb128())
    elif op in (DW_CFA_expression, DW_CFA_val_expression):
        kind = EXPRESSION if op == DW_CFA_expression else VAL_EXPRESSION
        reg = r.uleb128()
        regs[reg] = (kind, r.bytes(r.uleb128()))
    elif op == DW_CFA_GNU_args_size:
        r.uleb128()  # matters to exception handling only: the CFA does not depend on it
    elif op == DW_CFA_set_loc:
        # .eh_frame encodes the operand like initial_location (a pcrel base is the operand's own address)
        target = r.pointer(cie.fde_encoding, bases) if cie.has_augmentation_data else r.address(cie.address_size)
        if target < loc:
            raise BinaryError("CFA program: set_loc moves backwards")
        loc = _advance(state, rows, loc, target)
    elif op == DW_CFA_MIPS_advance_loc8:
        loc = _advance(state, rows, loc, loc + r.u64() * cie.code_alignment_factor)
    else:
        raise BinaryError(f"CFA program: unknown or unsupported opcode {op:#04x}")
    return loc


def _advance(state: _State, rows: list[Row] | None, loc: int, new_loc: int) -> int:
    """Close the row at ``loc`` and start one at ``new_loc`` (an advance by 0 starts no row)."""
    if rows is not None and new_loc != loc:
        rows.append(Row(loc, state.cfa, dict(state.regs)))
    return new_loc


def _with_offset(cfa: CfaRule, offset: int) -> CfaRule:
    if cfa[0] != CFA_REGISTER:
        raise BinaryError("CFA program: a CFA offset change while the CFA is not register-based")
    return (CFA_REGISTER, cfa[1], offset)


def _restore(regs: dict[int, RegisterRule], cie_regs: dict[int, RegisterRule] | None, reg: int) -> None:
    """DW_CFA_restore: back to the CIE's rule for ``reg`` (no rule if the CIE gave none)."""
    initial = cie_regs.get(reg) if cie_regs is not None else None
    if initial is None:
        regs.pop(reg, None)
    else:
        regs[reg] = initial
