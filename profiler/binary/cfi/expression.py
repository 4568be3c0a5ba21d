"""A DWARF expression evaluator for CFI rules (DWARF 5 section 2.5): a stack machine over 64-bit values.

CFI uses expressions for a CFA that no register+offset can express and for registers saved at computed
addresses. On x86-64 Linux they appear in the PLT::

    DW_CFA_def_cfa_expression: DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
                               DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus

(CFA = rsp + 8, plus 8 after the stub's ``push``), in functions that realign the stack (``main``:
``DW_OP_breg6 (rbp) -8; DW_OP_deref``), and in glibc's signal trampoline ``__restore_rt``, which finds
every register in the kernel's ``ucontext`` with ``DW_OP_breg7 (rsp) N``.

Pure: registers come from a list indexed by DWARF number and memory from a ``read_word`` callable, so
the evaluator runs on a copied stack and never on a pid. Every loop is bounded by ``MAX_OPS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from profiler.binary.cfi.encoding import ByteReader
from profiler.errors import BinaryError

# DWARF 5 table 7.9 (section 7.7.1): the operations CFI expressions use
DW_OP_addr = 0x03
DW_OP_deref = 0x06
DW_OP_const1u, DW_OP_const1s, DW_OP_const2u, DW_OP_const2s = 0x08, 0x09, 0x0A, 0x0B
DW_OP_const4u, DW_OP_const4s, DW_OP_const8u, DW_OP_const8s = 0x0C, 0x0D, 0x0E, 0x0F
DW_OP_constu, DW_OP_consts = 0x10, 0x11
DW_OP_dup, DW_OP_drop, DW_OP_over, DW_OP_pick, DW_OP_swap, DW_OP_rot = 0x12, 0x13, 0x14, 0x15, 0x16, 0x17
DW_OP_abs, DW_OP_and, DW_OP_div, DW_OP_minus, DW_OP_mod, DW_OP_mul = 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E
DW_OP_neg, DW_OP_not, DW_OP_or, DW_OP_plus, DW_OP_plus_uconst = 0x1F, 0x20, 0x21, 0x22, 0x23
DW_OP_shl, DW_OP_shr, DW_OP_shra, DW_OP_xor, DW_OP_bra = 0x24, 0x25, 0x26, 0x27, 0x28
DW_OP_eq, DW_OP_ge, DW_OP_gt, DW_OP_le, DW_OP_lt, DW_OP_ne, DW_OP_skip = 0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F
DW_OP_lit0, DW_OP_reg0, DW_OP_breg0 = 0x30, 0x50, 0x70
DW_OP_regx, DW_OP_bregx, DW_OP_deref_size, DW_OP_nop = 0x90, 0x92, 0x94, 0x96

#: operations one evaluation may execute (branches could otherwise loop forever)
MAX_OPS = 1000
#: values the stack may hold
MAX_STACK = 64
_MASK = (1 << 64) - 1
_SIGN = 1 << 63

WordReader = Callable[[int], "int | None"]

_CONST_SIZES = {
    DW_OP_const1u: (1, False), DW_OP_const1s: (1, True), DW_OP_const2u: (2, False), DW_OP_const2s: (2, True),
    DW_OP_const4u: (4, False), DW_OP_const4s: (4, True), DW_OP_const8u: (8, False), DW_OP_const8s: (8, True),
}  # fmt: skip

_BINARY: dict[int, Callable[[int, int], int]] = {
    DW_OP_and: lambda a, b: a & b,
    DW_OP_minus: lambda a, b: a - b,
    DW_OP_mul: lambda a, b: a * b,
    DW_OP_or: lambda a, b: a | b,
    DW_OP_plus: lambda a, b: a + b,
    DW_OP_shl: lambda a, b: a << b if b < 64 else 0,
    DW_OP_shr: lambda a, b: a >> b if b < 64 else 0,
    DW_OP_shra: lambda a, b: _signed(a) >> min(b, 63),
    DW_OP_xor: lambda a, b: a ^ b,
    DW_OP_eq: lambda a, b: int(_signed(a) == _signed(b)),
    DW_OP_ge: lambda a, b: int(_signed(a) >= _signed(b)),
    DW_OP_gt: lambda a, b: int(_signed(a) > _signed(b)),
    DW_OP_le: lambda a, b: int(_signed(a) <= _signed(b)),
    DW_OP_lt: lambda a, b: int(_signed(a) < _signed(b)),
    DW_OP_ne: lambda a, b: int(_signed(a) != _signed(b)),
}


class Unrecoverable(Exception):
    """The expression needs a register or a word the snapshot does not have (not a corrupt file)."""


def _signed(v: int) -> int:
    return v - (1 << 64) if v & _SIGN else v


def evaluate(expr: bytes, regs: Sequence[int | None], read_word: WordReader, initial: Sequence[int] = ()) -> int:
    """The value on top of the stack after running ``expr`` with ``initial`` pushed first.

    Raises ``Unrecoverable`` for a missing register or unreadable word, and ``BinaryError`` for a
    malformed expression (unknown opcode, stack underflow, a branch outside the expression).
    """
    r = ByteReader(expr, what="DWARF expression")
    stack = [v & _MASK for v in initial]
    for _ in range(MAX_OPS):
        if r.pos >= r.end:
            break
        op = r.u8()
        if DW_OP_lit0 <= op < DW_OP_lit0 + 32:
            stack.append(op - DW_OP_lit0)
        elif DW_OP_breg0 <= op < DW_OP_breg0 + 32:
            stack.append((_register(regs, op - DW_OP_breg0) + r.sleb128()) & _MASK)
        elif op == DW_OP_bregx:
            reg = r.uleb128()
            stack.append((_register(regs, reg) + r.sleb128()) & _MASK)
        elif DW_OP_reg0 <= op < DW_OP_reg0 + 32 or op == DW_OP_regx:
            raise BinaryError("DWARF expression: a register location is not a value (DW_OP_reg in CFI)")
        elif op in _BINARY:
            b, a = _pop(stack), _pop(stack)
            stack.append(_BINARY[op](a, b) & _MASK)
        else:
            _other(op, r, stack, read_word)
        if len(stack) > MAX_STACK:
            raise BinaryError("DWARF expression: stack overflow")
    else:
        raise BinaryError(f"DWARF expression: more than {MAX_OPS} operations")
    return _pop(stack)


def _other(op: int, r: ByteReader, stack: list[int], read_word: WordReader) -> None:
    """Stack manipulation, constants, memory and control flow."""
    if op in (DW_OP_deref, DW_OP_deref_size):
        size = r.u8() if op == DW_OP_deref_size else 8
        word = read_word(_pop(stack)) if 0 < size <= 8 else None
        if word is None:
            raise Unrecoverable("DWARF expression: DW_OP_deref outside the stack copy")
        stack.append(word & ((1 << (8 * size)) - 1))
    elif op in _CONST_SIZES:
        size, signed = _CONST_SIZES[op]
        value = int.from_bytes(r.bytes(size), "little", signed=signed)
        stack.append(value & _MASK)
    elif op in (DW_OP_constu, DW_OP_plus_uconst):
        value = r.uleb128()
        stack.append(value if op == DW_OP_constu else (_pop(stack) + value) & _MASK)
    elif op == DW_OP_consts:
        stack.append(r.sleb128() & _MASK)
    elif op == DW_OP_addr:
        stack.append(r.u64())
    elif op in (DW_OP_dup, DW_OP_over, DW_OP_pick):
        depth = {DW_OP_dup: 0, DW_OP_over: 1}.get(op)
        index = r.u8() if depth is None else depth
        if index >= len(stack):
            raise BinaryError("DWARF expression: stack underflow")
        stack.append(stack[-1 - index])
    elif op == DW_OP_drop:
        _pop(stack)
    elif op == DW_OP_swap:
        b, a = _pop(stack), _pop(stack)
        stack.extend((b, a))
    elif op == DW_OP_rot:
        c, b, a = _pop(stack), _pop(stack), _pop(stack)
        stack.extend((c, a, b))
    elif op in (DW_OP_abs, DW_OP_neg, DW_OP_not):
        v = _signed(_pop(stack))
        stack.append((abs(v) if op == DW_OP_abs else -v if op == DW_OP_neg else ~v) & _MASK)
    elif op in (DW_OP_div, DW_OP_mod):
        b, a = _pop(stack), _pop(stack)
        if b == 0:
            raise Unrecoverable("DWARF expression: division by zero")
        stack.append((int(_signed(a) / _signed(b)) if op == DW_OP_div else a % b) & _MASK)
    elif op in (DW_OP_skip, DW_OP_bra):
        offset = int.from_bytes(r.bytes(2), "little", signed=True)
        if op == DW_OP_skip or _pop(stack) != 0:
            target = r.pos + offset
            if not 0 <= target <= r.end:
                raise BinaryError("DWARF expression: branch outside the expression")
            r.pos = target
    elif op != DW_OP_nop:
        raise BinaryError(f"DWARF expression: unsupported operation {op:#04x}")


#: operations without operands that read no register (literals, arithmetic, stack manipulation, deref)
_NO_OPERANDS = frozenset(
    {DW_OP_deref, DW_OP_dup, DW_OP_drop, DW_OP_over, DW_OP_swap, DW_OP_rot, DW_OP_abs, DW_OP_neg, DW_OP_not,
     DW_OP_div, DW_OP_mod, DW_OP_nop, *_BINARY, *range(DW_OP_lit0, DW_OP_lit0 + 32)}
)  # fmt: skip


def registers_read(expr: bytes) -> frozenset[int] | None:
    """The registers ``expr`` reads (its ``DW_OP_breg`` operations), whichever way its branches go; None
    if it cannot be decoded (the unwinder then assumes it may read any)."""
    r = ByteReader(expr, what="DWARF expression")
    regs: set[int] = set()
    try:
        while r.pos < r.end:
            op = r.u8()
            if DW_OP_breg0 <= op < DW_OP_breg0 + 32:
                regs.add(op - DW_OP_breg0)
                r.sleb128()
            elif op == DW_OP_bregx:
                regs.add(r.uleb128())
                r.sleb128()
            elif op in _CONST_SIZES:
                r.bytes(_CONST_SIZES[op][0])
            elif op in (DW_OP_constu, DW_OP_plus_uconst):
                r.uleb128()
            elif op == DW_OP_consts:
                r.sleb128()
            elif op == DW_OP_addr:
                r.u64()
            elif op in (DW_OP_pick, DW_OP_deref_size):
                r.u8()
            elif op in (DW_OP_skip, DW_OP_bra):
                r.bytes(2)
            elif op not in _NO_OPERANDS:
                return None
    except BinaryError:
        return None
    return frozenset(regs)


def _pop(stack: list[int]) -> int:
    if not stack:
        raise BinaryError("DWARF expression: stack underflow")
    return stack.pop()


def _register(regs: Sequence[int | None], reg: int) -> int:
    value = regs[reg] if 0 <= reg < len(regs) else None
    if value is None:
        raise Unrecoverable(f"DWARF expression: register {reg} is not known in this frame")
    return value
