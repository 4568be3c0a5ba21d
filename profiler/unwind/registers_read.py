"""Which saved registers a walk reads: only those some unwind rule met so far uses.

A CFI step restores every callee-saved register its frame saved, but the rules compilers emit base a CFA
on rsp or rbp only, so the values of rbx and r12-r15 restored are never read again by a step. Reading
them costs each frame a few words (libpython's eval loop saves all six), and the walk log of
``reuse.py`` checks every word read, so a walk keeps rsp, the return address and rbp from the start
(``READ_FROM_START``) and adds a register only when a rule that uses it is met: then the walk in
progress, which may have left it out of its callers, is abandoned and started over (``RegistersGrew``).

A register left out becomes unknown (None) in the caller (``UnwindRule.forgotten``), never the callee's
value, so a walk that needed it fails loudly rather than follows a wrong value. Since no step reads the
others, two walks that differ only in them walk alike: ``same_state`` compares a caller frame's state on
the kept registers only.
"""

from __future__ import annotations

from profiler.binary.cfi import UnwindRule
from profiler.binary.cfi.rules import FAST, registers_used
from profiler.model import DW_RA, DW_RBP, DW_RSP, NUM_DWARF_REGS
from profiler.unwind.reuse import WalkState

#: the registers a walk keeps in every frame before any rule that uses another was met: rsp (the CFA) and
#: the return address, and of the callee-saved ones only rbp, read off the stack where a frame saved it
#: (frame-pointer steps and realigned frames' CFA expressions use it). Compilers save rbx and r12-r15 in
#: most frames and base no CFA on them, and each word read costs a walk ~0.3 us
READ_FROM_START = frozenset({DW_RSP, DW_RA, DW_RBP})
#: every register, for a rule whose expression could not be decoded
ALL_REGISTERS = frozenset(range(NUM_DWARF_REGS))


class RegistersGrew(Exception):
    """A rule or a frame met in a walk uses a register the walk did not keep (``RegistersRead.keep``): the
    walk must start over, with every rule admitted so far admitted again."""


class RegistersRead:
    """The registers one process's walks read where frames saved them; grows, never shrinks."""

    def __init__(self) -> None:
        self.registers: frozenset[int] = READ_FROM_START

    def admit(self, rule: UnwindRule | None) -> UnwindRule | None:
        """``rule`` as the walks keep it: its ``saved`` registers cut to those kept, the others
        ``forgotten`` (unknown in the caller). The kept registers grow by those ``rule`` uses, which
        raises ``RegistersGrew``."""
        if rule is None:
            return None
        used = registers_used(rule)
        if used is None or not used <= self.registers:
            self.keep(ALL_REGISTERS if used is None else used)
        if rule.kind == FAST and rule.saved:
            kept = tuple(saved for saved in rule.saved if saved[0] in self.registers)
            if len(kept) != len(rule.saved):
                forgotten = tuple(reg for reg, _offset in rule.saved if reg not in self.registers)
                rule = rule._replace(saved=kept, forgotten=forgotten)
        return rule

    def keep(self, registers: frozenset[int]) -> None:
        """Read ``registers`` where frames saved them from now on. The walk in progress, which may have left
        them out of its callers' registers, is abandoned (``RegistersGrew``) for the unwinder to start over."""
        grown = self.registers | registers
        if grown != self.registers:
            self.registers = grown
            raise RegistersGrew

    def same_state(self, a: WalkState, b: WalkState) -> bool:
        """Whether iterations starting at ``a`` and ``b`` (at the same stack pointer) walk alike over the same
        words. A caller's frame (looked up at its return address - 1) is stepped by rules that use only the
        registers kept, so only those are compared: the others hold values of inner frames that no step
        reads (a loop counter in rbx, the same-value rule carrying it up), which would make every state
        differ. The innermost frame, and one a signal interrupted, are compared whole: their step may use a
        register no rule uses (a prologue's frame based on a copy of rsp, ``NativeUnwinder``)."""
        regs_a, method_a, exact_a = a
        regs_b, method_b, exact_b = b
        if method_a is not method_b or exact_a != exact_b:
            return False
        if exact_a:
            return regs_a == regs_b
        return all(regs_a[reg] == regs_b[reg] for reg in self.registers)
