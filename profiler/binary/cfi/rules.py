"""The vocabulary of an unwind table row: CFA rules, register rules, and the compiled form the unwinder runs.

Names follow DWARF 5 section 6.4.1 ("Structure of Call Frame Information") and gimli's ``CfaRule`` /
``RegisterRule``. A decoded row says, for one address range of a function, how to compute the CFA
(the caller's stack pointer before the call) and where each register of the caller is.

The unwinder does not interpret rows field by field: each row is turned once into an ``UnwindRule``,
whose ``kind`` picks the code path. ``FAST`` covers what compilers emit in function bodies
(CFA = register + offset, return address and callee-saved registers at CFA + offset); anything else
(expressions, ``register``/``val_offset`` rules, signal frames) takes the ``GENERIC`` path.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from profiler.binary.cfi.expression import registers_read
from profiler.model import DW_R12, DW_R13, DW_R14, DW_R15, DW_RA, DW_RBP, DW_RBX, NUM_DWARF_REGS


class RuleKind(enum.IntEnum):
    """Register rules, DWARF 5 section 6.4.1 (``ARCHITECTURAL`` is not used on x86-64)."""

    SAME_VALUE = 0  #: the caller's value is this frame's value (also the default of callee-saved registers)
    UNDEFINED = 1  #: not recoverable; for the return address: the outermost frame
    OFFSET = 2  #: saved at address CFA + N
    VAL_OFFSET = 3  #: the value is CFA + N
    REGISTER = 4  #: saved in another register
    EXPRESSION = 5  #: saved at the address a DWARF expression computes (CFA pushed first)
    VAL_EXPRESSION = 6  #: the value is what a DWARF expression computes (CFA pushed first)


class CfaKind(enum.IntEnum):
    """How the CFA is computed (DWARF 5 section 6.4.2.2)."""

    REGISTER = 0  #: CFA = register + offset (DW_CFA_def_cfa and friends)
    EXPRESSION = 1  #: CFA = a DWARF expression (DW_CFA_def_cfa_expression; the PLT, stack realignment)
    UNDEFINED = 2  #: no CFA rule was given (a corrupt or empty CIE)


#: A CFA rule: (kind, register, offset) for REGISTER, (kind, 0, expression bytes) for EXPRESSION.
CfaRule = tuple[int, int, "int | bytes"]
#: A register rule: (kind, argument): an offset, a register number or expression bytes.
RegisterRule = tuple[int, "int | bytes"]

#: The registers with columns of their own in a compiled table: the return address and the callee-saved
#: registers of the System V x86-64 psABI (section 3.2.1, "Registers": rbx, rbp, r12-r15), the only
#: ones later frames can need. Rules for any other register (signal frames restore all of them) live in
#: a side table.
TRACKED_REGISTERS = (DW_RA, DW_RBX, DW_RBP, DW_R12, DW_R13, DW_R14, DW_R15)
CALLEE_SAVED = TRACKED_REGISTERS[1:]


class Row(NamedTuple):
    """One decoded row: rules in force from ``start`` up to the next row (or the end of the FDE)."""

    start: int
    cfa: CfaRule
    registers: dict[int, RegisterRule]


class UnwindKind(enum.IntEnum):
    """The unwinder's code path for a row (``profiler.unwind.cfi.step_cfi``)."""

    FAST = 0  #: CFA = reg + off; return address at [CFA + ra_offset]; ``saved`` callee-saved at [CFA + off]
    GENERIC = 1  #: evaluate ``cfa`` and ``registers`` rule by rule
    END = 2  #: the return address is undefined: this is the outermost frame (``_start``, ``clone3``)


# Plain-int twins of the enums for the decoder and the unwinder: reading an IntEnum member costs about
# 0.6 us in CPython 3.11 (measured), a module global 0.05 us.
SAME_VALUE, UNDEFINED, OFFSET, VAL_OFFSET, REGISTER, EXPRESSION, VAL_EXPRESSION = (int(k) for k in RuleKind)
CFA_REGISTER, CFA_EXPRESSION, CFA_UNDEFINED = (int(k) for k in CfaKind)
FAST, GENERIC, END = (int(k) for k in UnwindKind)
#: the rule kinds whose argument is an expression
EXPRESSION_KINDS = (EXPRESSION, VAL_EXPRESSION)


class UnwindRule(NamedTuple):
    """A row compiled for the unwinder; what the per-pc memo holds.

    Tuple fields rather than attributes so the hot loop can unpack them in one step.
    """

    kind: int  #: UnwindKind
    cfa_register: int
    cfa_offset: int
    ra_offset: int
    saved: tuple[tuple[int, int], ...]  #: (register, offset from CFA) of callee-saved registers (FAST)
    signal: bool  #: the FDE's CIE has the 'S' augmentation: the caller's pc is exact, not a return address
    cfa: CfaRule  #: the full CFA rule (GENERIC)
    registers: tuple[tuple[int, int, int | bytes], ...]  #: (register, kind, argument) (GENERIC)
    #: callee-saved registers this frame saved that the unwinder does not read (FAST): unknown in the
    #: caller, as no rule met uses them (``unwind/registers_read.py``, ``RegistersRead.admit``)
    forgotten: tuple[int, ...] = ()


def classify(cfa_kind: int, cfa_reg: int, ra_kind: int | None, others: dict[int, int], signal: bool) -> int:
    """The code path of a row (``others``: rule kind of each register except the return address).

    FAST is what compilers emit in function bodies: CFA = register + offset, the return address at
    CFA + N and callee-saved registers either untouched or at CFA + N. Signal frames always go GENERIC:
    they restore caller-saved registers too.
    """
    if ra_kind is None or ra_kind == UNDEFINED:
        return END
    if cfa_kind != CFA_REGISTER or cfa_reg >= NUM_DWARF_REGS or ra_kind != OFFSET or signal:
        return GENERIC
    for reg, kind in others.items():
        if kind != SAME_VALUE and (kind != OFFSET or reg not in CALLEE_SAVED):
            return GENERIC
    return FAST


def compile_rule(row: Row, signal: bool) -> UnwindRule:
    """The unwinder's form of a row; rules of registers it cannot hold (xmm, >= 17) are dropped."""
    regs = {r: rule for r, rule in row.registers.items() if 0 <= r < NUM_DWARF_REGS}
    listed = tuple((r, kind, arg) for r, (kind, arg) in sorted(regs.items()))
    ra = regs.pop(DW_RA, None)
    cfa_kind, cfa_reg, cfa_arg = row.cfa
    kind = classify(cfa_kind, cfa_reg, ra[0] if ra else None, {r: k for r, (k, _a) in regs.items()}, signal)
    if kind != FAST or ra is None:
        return UnwindRule(kind, 0, 0, 0, (), signal, row.cfa, listed)
    saved = tuple((r, int(arg)) for r, (k, arg) in sorted(regs.items()) if k == OFFSET)
    return UnwindRule(FAST, cfa_reg, int(cfa_arg), int(ra[1]), saved, signal, row.cfa, listed)


def registers_used(rule: UnwindRule) -> frozenset[int] | None:
    """The registers of the frame that ``rule`` reads to find the caller's (the CFA's base, registers its
    expressions read, registers copied), besides the words it reads at CFA + N; None if it may read any
    (an expression that cannot be decoded). The unwinder reads a saved register off the stack only once
    a rule that uses it was met (``unwind/registers_read.py``)."""
    if rule.kind == FAST:
        return frozenset((rule.cfa_register,))
    if rule.kind == END:
        return frozenset()
    used: set[int] = set()
    cfa_kind, cfa_reg, cfa_arg = rule.cfa
    expressions = [bytes(cfa_arg)] if cfa_kind == CFA_EXPRESSION else []
    if cfa_kind == CFA_REGISTER:
        used.add(cfa_reg)
    for reg, kind, arg in rule.registers:
        if kind == REGISTER:
            used.add(arg)  # type: ignore[arg-type]
        elif kind == SAME_VALUE:
            used.add(reg)
        elif kind in EXPRESSION_KINDS:
            expressions.append(arg)  # type: ignore[arg-type]
    for expr in expressions:
        read = registers_read(expr)
        if read is None:
            return None
        used |= read
    return frozenset(used)
