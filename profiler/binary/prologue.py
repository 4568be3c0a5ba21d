"""Where a function's return address is, at any instruction, judged from its code with capstone.

Why: gcc gives leaf functions no rbp frame even under ``-fno-omit-frame-pointer``, and every function runs
a few instructions before ``mov %rsp,%rbp``. A plain rbp walk from such an innermost frame skips its caller
(perf does this in 100% of samples of a leaf, measured here). Simulating the stack pointer from the function
start tells whether rbp is set up yet and where the return address sits.

The simulation is a linear sweep. A ``ret`` or unconditional ``jmp`` ends a path, and the code after it is
assumed to run in the function's *body state* (the state after its prologue), which is how gcc and clang
lay out early returns and tail blocks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import capstone

#: the frame is set up: rbp points at (saved rbp, return address) of this function
FRAME_SET = -1


@dataclass(frozen=True)
class FrameState:
    """Where to find the caller's state relative to rsp, at one instruction.

    ``ra_offset`` is FRAME_SET when the rbp chain is valid from this frame; otherwise the return address is
    at ``[rsp + ra_offset]`` and the caller's rbp is at ``[rsp + rbp_offset]`` (or still in rbp when
    ``rbp_offset`` is None).
    """

    ra_offset: int
    rbp_offset: int | None = None


_ENTRY = FrameState(0, None)


class _Sweep:
    """Stack-pointer simulation state."""

    __slots__ = ("delta", "rbp_saved_at", "frame_set")

    def __init__(self) -> None:
        self.delta = 0  # bytes below the entry rsp
        self.rbp_saved_at: int | None = None  # delta right after `push rbp`
        self.frame_set = False

    def copy(self) -> _Sweep:
        s = _Sweep()
        s.delta, s.rbp_saved_at, s.frame_set = self.delta, self.rbp_saved_at, self.frame_set
        return s

    def state(self) -> FrameState:
        if self.frame_set:
            return FrameState(FRAME_SET)
        if self.rbp_saved_at is not None:
            return FrameState(self.delta, self.delta - self.rbp_saved_at)
        return FrameState(self.delta, None)


def _imm(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


class FunctionLayout:
    """Frame states at every instruction boundary of one function, from one capstone sweep."""

    def __init__(self, code: bytes, start: int) -> None:
        self._addrs: list[int] = []
        self._states: list[FrameState] = []
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

    def _record(self, addr: int, state: FrameState) -> None:
        if not self._states or self._states[-1] != state:
            self._addrs.append(addr)
            self._states.append(state)

    @staticmethod
    def _step(s: _Sweep, mnemonic: str, op_str: str) -> None:
        if mnemonic == "push":
            s.delta += 8
            if op_str == "rbp":
                s.rbp_saved_at = s.delta
        elif mnemonic == "pop":
            s.delta -= 8
            if op_str == "rbp":
                s.rbp_saved_at = None
                s.frame_set = False
        elif mnemonic == "mov" and op_str == "rbp, rsp":
            if s.rbp_saved_at is not None:
                s.frame_set = True
        elif mnemonic == "leave":
            if s.rbp_saved_at is not None:
                s.delta = s.rbp_saved_at - 8
            s.rbp_saved_at = None
            s.frame_set = False
        elif mnemonic in ("sub", "add") and op_str.startswith("rsp, "):
            n = _imm(op_str[5:])
            if n is not None:
                s.delta += n if mnemonic == "sub" else -n

    def state_at(self, addr: int) -> FrameState:
        if addr in self._rets:
            return _ENTRY
        i = bisect.bisect_right(self._addrs, addr) - 1
        return self._states[i] if i >= 0 else _ENTRY
