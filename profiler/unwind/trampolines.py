"""Frames of known call trampolines in file-less code, which has no CFI and keeps no frame pointer.

CPython 3.12 and 3.13 under ``-X perf`` run each code object through a copy of one trampoline in anonymous
memory (``Python/asm_trampoline.S``: ``sub $8,%rsp; call *%rcx; add $8,%rsp; ret``), which saves no register.
At a return address after its call the frame is fixed (the caller's stack pointer 16 bytes up, the return
address at 8, every other register the caller's): ``rule_before`` gives that rule, which the unwinder
memoizes per address as it does a file's rows.
The bytes, and what the rbp chain did there: docs/decisions/jit-trampolines.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from profiler.binary.cfi.rules import CFA_REGISTER, OFFSET, Row, UnwindRule, compile_rule
from profiler.model import DW_RA, DW_RSP


class Trampoline(NamedTuple):
    """A trampoline recognised at a return address by the bytes around it."""

    before: bytes  #: the bytes that end at the return address (through the call)
    after: bytes  #: the bytes that start at it
    cfa_offset: int  #: the caller's stack pointer, from the stack pointer at the return address
    ra_offset: int  #: where the caller's return address is, from the same stack pointer

    @property
    def rule(self) -> UnwindRule:
        """Its frame as a CFI row would give it: CFA = rsp + cfa_offset, the return address saved in it."""
        ra = (OFFSET, self.ra_offset - self.cfa_offset)
        return compile_rule(Row(0, (CFA_REGISTER, DW_RSP, self.cfa_offset), {DW_RA: ra}), False)


CPYTHON_PERF = Trampoline(b"\x48\x83\xec\x08\xff\xd1", b"\x48\x83\xc4\x08\xc3", 16, 8)
TRAMPOLINES = (CPYTHON_PERF,)
#: bytes read around a return address to recognise every trampoline above
BEFORE = max(len(t.before) for t in TRAMPOLINES)
AFTER = max(len(t.after) for t in TRAMPOLINES)


def recognise(code: bytes) -> Trampoline | None:
    """The trampoline whose return address is ``code[BEFORE]`` (``code`` read from BEFORE bytes ahead of
    it, BEFORE + AFTER bytes), or None."""
    for t in TRAMPOLINES:
        if code[BEFORE - len(t.before) : BEFORE] == t.before and code[BEFORE : BEFORE + len(t.after)] == t.after:
            return t
    return None


def rule_before(read: Callable[[int, int], bytes], avma: int) -> UnwindRule | None:
    """The unwind rule at ``avma`` in file-less code, where it is the byte before a known trampoline's return
    address (the unwinder looks a caller up one byte back); None anywhere else. ``read`` reads the target."""
    code = read(avma + 1 - BEFORE, BEFORE + AFTER)
    found = recognise(code) if len(code) == BEFORE + AFTER else None
    return found.rule if found is not None else None
