"""Where a function's return address is, at any instruction, judged from its code with capstone.

Why: gcc gives leaf functions no rbp frame even under ``-fno-omit-frame-pointer``, and every function runs
a few instructions before ``mov %rsp,%rbp``. A plain rbp walk from such an innermost frame skips its caller
(perf does this in 100% of samples of a leaf, measured here). Simulating the stack pointer from the function
start tells whether rbp is set up yet and where the return address sits.

The simulation is a linear sweep. A ``ret`` or unconditional ``jmp`` ends a path, and the code after it is
assumed to run in the function's *body state* (the state after its prologue), which is how gcc and clang
lay out early returns and tail blocks.

A function that realigns its stack (``and rsp, -N``) no longer has its return address at a known distance
from rsp. Hand-written kernels without CFI do this after keeping rsp in a callee-saved register: every
OpenBLAS gemm kernel for x86-64 starts ``sub rsp, 0x60; ...; mov rbx, rsp; sub rsp, N; and rsp, -4096``
(the innermost frame of most samples of a numpy matrix product). The sweep follows such a copy, and the
state then says where the return address is from that register; with no copy, the state is unknown.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import capstone

#: the frame is set up: rbp points at (saved rbp, return address) of this function
FRAME_SET = -1


@dataclass(frozen=True)
class FrameState:
    """Where to find the caller's state relative to rsp, at one instruction.

    ``ra_offset`` is FRAME_SET when the rbp chain is valid from this frame; otherwise the return address is
    at ``[sp + ra_offset]`` and the caller's rbp is at ``[sp + rbp_offset]`` (or still in rbp when
    ``rbp_offset`` is None), where sp is rsp, or the register numbered ``base`` (DWARF) if one is given: the
    copy of rsp a function kept before realigning its stack.
    """

    ra_offset: int
    rbp_offset: int | None = None
    base: int | None = None


_ENTRY = FrameState(0, None)

#: the callee-saved registers (System V psABI, "Registers") whose copy of rsp the sweep follows, by the names
#: capstone gives their parts, with their DWARF numbers (model.py). Callee-saved: a call leaves them as they
#: were, so only the function's own instructions can change them, and those are seen by the sweep
_COPY_REGISTERS = {"rbx": 3, "r12": 12, "r13": 13, "r14": 14, "r15": 15}
_PARTS = {part: reg for reg in ("rbx", "r12", "r13", "r14", "r15")
          for part in ((reg, "e" + reg[1:], reg[1:], "bl", "bh") if reg == "rbx"
                       else (reg, reg + "d", reg + "w", reg + "b"))}  # fmt: skip
#: instructions that read their first operand without writing it
_READ_ONLY = frozenset({"cmp", "test", "push", "bt"})
#: ``mov qword ptr [rsp + n], rbp``: rbp saved by a store rather than a push
_RBP_STORE = re.compile(r"qword ptr \[rsp(?: \+ (0x[0-9a-f]+|\d+))?\], rbp$")


class _Sweep:
    """Stack-pointer simulation state."""

    __slots__ = ("delta", "rbp_saved_at", "frame_set", "copies")

    def __init__(self) -> None:
        self.delta: int | None = 0  # bytes below the entry rsp; None once rsp was realigned
        self.rbp_saved_at: int | None = None  # the caller's rbp is at entry rsp - this (after `push rbp`: delta)
        self.frame_set = False
        self.copies: dict[str, int] = {}  # register -> delta of the rsp it holds (``_COPY_REGISTERS``)

    def copy(self) -> _Sweep:
        s = _Sweep()
        s.delta, s.rbp_saved_at, s.frame_set = self.delta, self.rbp_saved_at, self.frame_set
        s.copies = dict(self.copies)
        return s

    def state(self) -> FrameState | None:
        if self.frame_set:
            return FrameState(FRAME_SET)
        if self.delta is not None:
            base, at = None, self.delta
        elif self.copies:
            reg, at = next(iter(self.copies.items()))
            base = _COPY_REGISTERS[reg]
        else:
            return None  # realigned, and no copy of rsp kept: nothing says where the return address is
        return FrameState(at, None if self.rbp_saved_at is None else at - self.rbp_saved_at, base)


def _below_rbp(mnemonic: str, source: str) -> int | None:
    """How far below rbp an instruction that writes rsp from rbp puts it: ``mov rsp, rbp`` 0, ``lea rsp,
    [rbp - n]`` n (gcc's epilogue before popping the registers it saved); None for anything else."""
    if mnemonic == "mov" and source == "rbp":
        return 0
    if mnemonic == "lea" and source.startswith("[rbp - ") and source.endswith("]"):
        return _imm(source[7:-1])
    return None


def _imm(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


class FunctionLayout:
    """Frame states at every instruction boundary of one function, from one capstone sweep."""

    def __init__(self, code: bytes, start: int) -> None:
        self._addrs: list[int] = []
        self._states: list[FrameState | None] = []
        self._rets: set[int] = set()
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        sweep = _Sweep()
        body: _Sweep | None = None
        for addr, _size, mnemonic, op_str in md.disasm_lite(code, start):
            self._record(addr, sweep.state())
            if mnemonic in ("ret", "retq", "jmp") or (mnemonic == "ud2"):
                if mnemonic in ("ret", "retq"):
                    self._rets.add(addr)
                sweep = (body or _Sweep()).copy()
                continue
            if mnemonic.startswith("j") or mnemonic == "call":
                if body is None:
                    body = sweep.copy()  # the first branch ends the prologue
                continue
            self._step(sweep, mnemonic, op_str)
        if body is None:
            body = sweep

    def _record(self, addr: int, state: FrameState | None) -> None:
        if not self._states or self._states[-1] != state:
            self._addrs.append(addr)
            self._states.append(state)

    @staticmethod
    def _step(s: _Sweep, mnemonic: str, op_str: str) -> None:
        delta = s.delta
        if mnemonic == "push":
            if delta is not None:
                s.delta = delta = delta + 8
                if op_str == "rbp":
                    s.rbp_saved_at = delta
            return
        if mnemonic == "pop":
            if delta is not None:
                s.delta = delta - 8
            if op_str == "rbp":
                s.rbp_saved_at = None
                s.frame_set = False
        elif mnemonic == "leave":
            if s.rbp_saved_at is not None:
                s.delta = s.rbp_saved_at - 8
            s.rbp_saved_at = None
            s.frame_set = False
            return
        elif op_str.startswith("rsp, "):  # rsp written
            source = op_str[5:]
            if mnemonic in ("sub", "add") and delta is not None and (n := _imm(source)) is not None:
                s.delta = delta + n if mnemonic == "sub" else delta - n
            elif mnemonic == "mov" and source in s.copies:
                s.delta = s.copies[source]
            elif s.frame_set and s.rbp_saved_at is not None and (n := _below_rbp(mnemonic, source)) is not None:
                s.delta = s.rbp_saved_at + n  # `mov rsp, rbp` or `lea rsp, [rbp - n]`: rsp from the frame
            elif mnemonic not in _READ_ONLY:
                s.delta = None  # `and rsp, -N`, `sub rsp, rax`, ...: unknown from here
            return
        elif mnemonic == "mov" and op_str == "rbp, rsp":
            if s.rbp_saved_at is not None:
                s.frame_set = True
            return
        elif mnemonic == "mov" and delta is not None and s.rbp_saved_at is None and not s.frame_set:
            m = _RBP_STORE.match(op_str)
            if m is not None:
                s.rbp_saved_at = delta - (int(m.group(1), 0) if m.group(1) else 0)
                return
        if s.copies and mnemonic not in _READ_ONLY:  # a register holding a copy of rsp written: forgotten
            first, _, second = op_str.partition(", ")
            for written in (first, second) if mnemonic == "xchg" else (first,):
                s.copies.pop(_PARTS.get(written, ""), None)
            if mnemonic == "cpuid":
                s.copies.pop("rbx", None)
        if mnemonic == "mov" and delta is not None and op_str[:3] in _COPY_REGISTERS and op_str[3:] == ", rsp":
            s.copies[op_str[:3]] = delta

    def state_at(self, addr: int) -> FrameState | None:
        """The frame state before the instruction at ``addr``; None where the sweep lost track of rsp."""
        if addr in self._rets:
            return _ENTRY
        i = bisect.bisect_right(self._addrs, addr) - 1
        return self._states[i] if i >= 0 else _ENTRY
