"""Whether a stopped thread was waiting in the kernel, from its registers alone (x86-64).

At a ptrace stop ``orig_rax`` is the system call the thread was in (-1 outside one), ``rax`` its result or
``-ERESTART*``, and the argument registers are preserved. A thread was waiting when it was interrupted
asleep (a restart code or ``-EINTR``), or woken and not back in user code yet: at the return of a call
whose purpose is to wait. A wait with a zero timeout passed by value (``poll``, ``epoll_wait``, ``WNOHANG``)
is not one; where the timeout is passed by pointer, the call counts as a wait.
Why the second case matters: docs/decisions/blocked-from-registers.md."""

from __future__ import annotations

import errno

from profiler.target.ptrace import WNOHANG, user_regs_struct

# The kernel's internal "restart this syscall" codes (include/linux/errno.h). A thread stopped while
# blocked in an interruptible syscall shows rax = -code and orig_rax = the syscall number.
ERESTARTSYS = 512
ERESTARTNOINTR = 513
ERESTARTNOHAND = 514
ERESTART_RESTARTBLOCK = 516
_INTERRUPTED = frozenset({ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK, errno.EINTR})

# System call numbers (arch/x86/entry/syscalls/syscall_64.tbl, as in <asm/unistd_64.h>)
SYS_POLL = 7
SYS_SELECT = 23
SYS_PAUSE = 34
SYS_NANOSLEEP = 35
SYS_WAIT4 = 61
SYS_RT_SIGTIMEDWAIT = 128
SYS_RT_SIGSUSPEND = 130
SYS_FUTEX = 202
SYS_CLOCK_NANOSLEEP = 230
SYS_EPOLL_WAIT = 232
SYS_WAITID = 247
SYS_PSELECT6 = 270
SYS_PPOLL = 271
SYS_EPOLL_PWAIT = 281
SYS_EPOLL_PWAIT2 = 441
SYS_FUTEX_WAITV = 449

#: calls that wait whatever their arguments, or with a timeout the registers do not hold
_ALWAYS_WAIT = frozenset({
    SYS_SELECT, SYS_PAUSE, SYS_NANOSLEEP, SYS_RT_SIGTIMEDWAIT, SYS_RT_SIGSUSPEND, SYS_CLOCK_NANOSLEEP,
    SYS_PSELECT6, SYS_PPOLL, SYS_EPOLL_PWAIT2, SYS_FUTEX_WAITV,
})  # fmt: skip

# linux/futex.h: the operations of futex(2) that wait; the command is the op without its flag bits
FUTEX_WAIT = 0
FUTEX_LOCK_PI = 6
FUTEX_WAIT_BITSET = 9
FUTEX_WAIT_REQUEUE_PI = 11
FUTEX_LOCK_PI2 = 13
FUTEX_PRIVATE_FLAG = 128
FUTEX_CLOCK_REALTIME = 256
_FUTEX_WAITS = frozenset({FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2})

_U64 = 1 << 64


#: a C ``int`` argument is the low half of its register (the upper half is undefined)
_INT_BITS = 0xFFFFFFFF


def waiting(regs: user_regs_struct) -> bool:
    """True when the registers of a stopped thread show it asleep in the kernel, or just woken from a wait
    and not yet back in user code (the module docstring)."""
    nr = regs.orig_rax
    if nr >= 1 << 63:
        return False  # -1 (as the unsigned register holds it): not in a system call
    if (-regs.rax) % _U64 in _INTERRUPTED:
        return True
    if nr in _ALWAYS_WAIT:
        return True
    if nr == SYS_FUTEX:
        return regs.rsi & _INT_BITS & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) in _FUTEX_WAITS
    if nr == SYS_POLL:
        return bool(regs.rdx & _INT_BITS)  # the timeout in ms: 0 returns at once, negative waits for ever
    if nr == SYS_EPOLL_WAIT or nr == SYS_EPOLL_PWAIT:
        return bool(regs.r10 & _INT_BITS)  # the same timeout, the fourth argument
    if nr == SYS_WAIT4:
        return not regs.rdx & WNOHANG
    if nr == SYS_WAITID:
        return not regs.r10 & WNOHANG
    return False
