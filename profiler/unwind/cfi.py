"""One CFI step: from a frame's registers and a compiled rule to the caller's registers.

Register sets are lists indexed by DWARF number (``profiler.model``: rax=0 ... r15=15, the return
address column 16 holds rip); ``None`` marks a value that cannot be recovered. The only memory is the
copied ``StackWindow``: the step is pure, so it runs after the thread was resumed and in tests over
bytes built by hand.

What the caller's register set holds (DWARF 5 section 6.4.1, System V x86-64 psABI section 3.2.1):

* rsp is the CFA, by definition of the CFA;
* rip is the return address (or, below a signal frame, the interrupted pc);
* callee-saved registers (rbx, rbp, r12-r15) are the same as in this frame unless a rule says where
  they were saved (and unknown where the unwinder chose not to read them: ``UnwindRule.forgotten``);
* caller-saved registers are unknown (``None``) unless a rule restores them, as a signal frame does.

The ``FAST`` path covers the rows compilers emit in function bodies in a few hundred nanoseconds; every
other row (expressions, signal frames, ``register``/``val_offset`` rules) goes through ``_step_generic``.
"""

from __future__ import annotations

from profiler.binary.cfi import Unrecoverable, UnwindRule, evaluate
from profiler.binary.cfi.rules import (
    CFA_EXPRESSION,
    CFA_REGISTER,
    END,
    EXPRESSION,
    FAST,
    OFFSET,
    REGISTER,
    SAME_VALUE,
    UNDEFINED,
    VAL_EXPRESSION,
    VAL_OFFSET,
)
from profiler.errors import BinaryError
from profiler.model import DW_RA, DW_RSP, NUM_DWARF_REGS, StopReason
from profiler.unwind.stack import StackWindow

Registers = list[int | None]  #: indexed by DWARF register number; None: not recovered

def step_cfi(rule: UnwindRule, regs: Registers, window: StackWindow) -> Registers | StopReason:
    """The caller's registers, or why this frame cannot be unwound."""
    kind, cfa_reg, cfa_off, ra_off, saved, _signal, _cfa, _registers, forgotten = rule
    if kind == FAST:
        base = regs[cfa_reg]
        if base is None:
            return StopReason.BAD_FRAME
        cfa = base + cfa_off
        read = window.read
        ra = read(cfa + ra_off)
        if ra is None:
            return _missing(window, cfa + ra_off)
        caller = [None, None, None, regs[3], None, None, regs[6], cfa,
                  None, None, None, None, regs[12], regs[13], regs[14], regs[15], ra]  # fmt: skip
        for reg, off in saved:
            caller[reg] = read(cfa + off)
        for reg in forgotten:  # saved here, and never used: not worth a read
            caller[reg] = None
        return caller
    if kind == END:
        return StopReason.END_OF_STACK
    try:
        return _step_generic(rule, regs, window)
    except (Unrecoverable, BinaryError):
        return StopReason.BAD_FRAME  # an expression needing an unknown register or word, or malformed


def _missing(window: StackWindow, addr: int) -> StopReason:
    """Why a word the rules need is not in the copy: above a full window, or not on the stack at all."""
    return StopReason.WINDOW_EXHAUSTED if window.full and addr >= window.end else StopReason.BAD_FRAME


def _step_generic(rule: UnwindRule, regs: Registers, window: StackWindow) -> Registers | StopReason:
    cfa_kind, cfa_reg, cfa_arg = rule.cfa
    read = window.read
    if cfa_kind == CFA_REGISTER:
        base = regs[cfa_reg] if 0 <= cfa_reg < NUM_DWARF_REGS else None
        if base is None:
            return StopReason.BAD_FRAME
        cfa = base + int(cfa_arg)
    elif cfa_kind == CFA_EXPRESSION:
        cfa = evaluate(bytes(cfa_arg), regs, read)
    else:
        return StopReason.BAD_FRAME
    caller: Registers = [None, None, None, regs[3], None, None, regs[6], cfa,
                         None, None, None, None, regs[12], regs[13], regs[14], regs[15], None]  # fmt: skip
    ra_at: int | None = None
    # ``arg`` is an int for the offset and register kinds, the expression's bytes for the others (rules.py)
    for reg, kind, arg in rule.registers:
        if kind == OFFSET or kind == EXPRESSION:
            addr = cfa + arg if kind == OFFSET else evaluate(arg, regs, read, (cfa,))  # type: ignore[operator, arg-type]
            caller[reg] = read(addr)
            if reg == DW_RA:
                ra_at = addr
        elif kind == VAL_OFFSET:
            caller[reg] = cfa + arg  # type: ignore[operator]
        elif kind == VAL_EXPRESSION:
            caller[reg] = evaluate(arg, regs, read, (cfa,))  # type: ignore[arg-type]
        elif kind == REGISTER:
            caller[reg] = regs[arg] if 0 <= arg < NUM_DWARF_REGS else None  # type: ignore[operator, index]
        elif kind == SAME_VALUE:
            caller[reg] = regs[reg]
        elif kind == UNDEFINED:
            caller[reg] = None
    if caller[DW_RA] is None:
        return _missing(window, ra_at) if ra_at is not None else StopReason.BAD_FRAME
    if caller[DW_RSP] is None:
        return StopReason.BAD_FRAME
    return caller
