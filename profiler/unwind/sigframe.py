"""A thread found at a signal handler's first instruction, and the context its signal interrupted.

A traced thread takes every signal through a signal-delivery-stop; nprof resumes it with the signal
(``tracer.py``). Only then, on its way back to user mode, does the kernel build the handler's frame and
point rip at the handler. A PTRACE_INTERRUPT that arrives in between — a tick soon after, or the scheduler
slow to run the thread — stops it right there: at the handler's first instruction, the handler not run.
Untraced, the handler would already be done (or never seen: a handler that counts takes nanoseconds), so
such a sample is an artefact of tracing. It was 0.1-13% of the samples of a target taking a SIGALRM
every millisecond, recorded at 500 Hz, all at the handler's entry.

Such a sample is taken where the signal arrived instead, as a sample taken at the delivery-stop itself is
(``tracer.resume_action``): the registers the kernel saved in the frame. The frame is recognised by the
registers the kernel hands the handler (arch/x86/kernel/signal_64.c, ``x64_setup_rt_frame``), checked
with gdb at ``break *handler``: rdi the signal number, rax 0, rsp the frame (``struct rt_sigframe``,
whose first word is the return address into the restorer), rdx its ``uc``, rsi its ``info``.
"""

from __future__ import annotations

from profiler.model import (
    DW_R8,
    DW_R9,
    DW_R10,
    DW_R11,
    DW_R12,
    DW_R13,
    DW_R14,
    DW_R15,
    DW_RA,
    DW_RAX,
    DW_RBP,
    DW_RBX,
    DW_RCX,
    DW_RDI,
    DW_RDX,
    DW_RSI,
    DW_RSP,
    NUM_DWARF_REGS,
)
from profiler.unwind.stack import StackWindow

#: ``struct rt_sigframe`` (arch/x86/include/asm/sigframe.h, 64-bit): ``char *pretcode; struct ucontext uc;
#: struct siginfo info;``. ``struct ucontext`` (include/uapi/asm-generic/ucontext.h): ``uc_flags`` (8),
#: ``uc_link`` (8), ``uc_stack`` (stack_t, 24), ``uc_mcontext`` (struct sigcontext, 256), ``uc_sigmask`` (8)
UC_OFFSET = 8
UCONTEXT_SIZE = 304
INFO_OFFSET = UC_OFFSET + UCONTEXT_SIZE
MCONTEXT_OFFSET = UC_OFFSET + 8 + 8 + 24

#: ``struct sigcontext`` (arch/x86/include/uapi/asm/sigcontext.h, 64-bit) begins with these registers, one
#: u64 each, in this order (glibc's REG_R8 ... REG_RIP); rip goes to the return address column
SIGCONTEXT_REGS = (DW_R8, DW_R9, DW_R10, DW_R11, DW_R12, DW_R13, DW_R14, DW_R15,
                   DW_RDI, DW_RSI, DW_RBP, DW_RBX, DW_RDX, DW_RAX, DW_RCX, DW_RSP, DW_RA)  # fmt: skip


def at_handler_entry(regs: list[int], signo: int) -> bool:
    """Whether ``regs`` (DWARF order) are those the kernel gives a handler of ``signo`` on entry."""
    sp = regs[DW_RSP]
    return (
        regs[DW_RDI] == signo
        and regs[DW_RAX] == 0
        and regs[DW_RDX] == sp + UC_OFFSET
        and regs[DW_RSI] == sp + INFO_OFFSET
    )


def interrupted_registers(regs: list[int], window: StackWindow, signo: int) -> list[int] | None:
    """The registers (DWARF order) ``signo`` interrupted, if ``regs`` stand at its handler's first instruction
    and the frame is in the copied ``window``; else None."""
    if not at_handler_entry(regs, signo):
        return None
    base = regs[DW_RSP] + MCONTEXT_OFFSET
    interrupted = [0] * NUM_DWARF_REGS
    for i, reg in enumerate(SIGCONTEXT_REGS):
        word = window.read(base + 8 * i)
        if word is None:
            return None
        interrupted[reg] = word
    return interrupted if interrupted[DW_RA] else None
