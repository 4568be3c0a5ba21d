"""Which registers of a stopped thread mean it was waiting in the kernel (``profiler/target/syscalls.py``).

Pure logic over register values; the integration test ``test_record_duty.py`` checks real stops."""

from __future__ import annotations

import errno
from types import SimpleNamespace

import pytest

from profiler.target import syscalls as sc

U64 = 1 << 64


def regs(nr: int, rax: int = 0, rsi: int = 0, rdx: int = 0, r10: int = 0) -> SimpleNamespace:
    """Registers as ``user_regs_struct`` holds them: unsigned 64-bit, so -1 is 2**64 - 1."""
    return SimpleNamespace(orig_rax=nr % U64, rax=rax % U64, rsi=rsi % U64, rdx=rdx % U64, r10=r10 % U64)


def test_outside_a_system_call_is_not_waiting():
    assert not sc.waiting(regs(-1, rax=-sc.ERESTARTSYS))  # orig_rax -1: computing in user code


@pytest.mark.parametrize("code", [sc.ERESTARTSYS, sc.ERESTARTNOHAND, sc.ERESTART_RESTARTBLOCK, errno.EINTR])
def test_interrupted_while_asleep_is_waiting_whatever_the_call(code):
    assert sc.waiting(regs(0, rax=-code))  # read() on a pipe, interrupted by the stop


def test_a_call_that_did_its_work_is_not_waiting():
    assert not sc.waiting(regs(1, rax=12))  # write() returned 12
    assert not sc.waiting(regs(0, rax=-errno.EAGAIN))  # a non-blocking read() with nothing to read


@pytest.mark.parametrize(
    "nr", [sc.SYS_NANOSLEEP, sc.SYS_CLOCK_NANOSLEEP, sc.SYS_PAUSE, sc.SYS_RT_SIGSUSPEND, sc.SYS_SELECT,
           sc.SYS_PSELECT6, sc.SYS_PPOLL, sc.SYS_EPOLL_PWAIT2, sc.SYS_FUTEX_WAITV],
)  # fmt: skip
def test_woken_from_a_wait_before_returning_is_waiting(nr):
    assert sc.waiting(regs(nr, rax=0))


def test_sigtimedwait_that_timed_out_is_waiting():
    assert sc.waiting(regs(sc.SYS_RT_SIGTIMEDWAIT, rax=-errno.EAGAIN))  # nprof's own wait between ticks


def test_futex_waits_by_operation():
    private = sc.FUTEX_PRIVATE_FLAG
    assert sc.waiting(regs(sc.SYS_FUTEX, rsi=sc.FUTEX_WAIT | private))
    assert sc.waiting(regs(sc.SYS_FUTEX, rsi=sc.FUTEX_WAIT_BITSET | private | sc.FUTEX_CLOCK_REALTIME))
    assert sc.waiting(regs(sc.SYS_FUTEX, rsi=sc.FUTEX_LOCK_PI))
    assert not sc.waiting(regs(sc.SYS_FUTEX, rsi=1 | private, rax=1))  # FUTEX_WAKE woke one waiter
    assert sc.waiting(regs(sc.SYS_FUTEX, rsi=(0xDEAD << 32) | sc.FUTEX_WAIT))  # op is an int: upper half ignored


def test_timeouts_passed_by_value():
    assert sc.waiting(regs(sc.SYS_POLL, rdx=-1))  # poll(fds, n, -1): until an event
    assert sc.waiting(regs(sc.SYS_POLL, rdx=500))
    assert not sc.waiting(regs(sc.SYS_POLL, rdx=0, rax=0))  # poll(fds, n, 0) only looks
    assert not sc.waiting(regs(sc.SYS_POLL, rdx=0xFFFFFFFF << 32))  # int 0 with garbage above it
    assert sc.waiting(regs(sc.SYS_EPOLL_WAIT, r10=10))
    assert not sc.waiting(regs(sc.SYS_EPOLL_PWAIT, r10=0))


def test_waits_for_children_unless_wnohang():
    assert sc.waiting(regs(sc.SYS_WAIT4, rdx=0))
    assert not sc.waiting(regs(sc.SYS_WAIT4, rdx=sc.WNOHANG))
    assert sc.waiting(regs(sc.SYS_WAITID, r10=4))  # WEXITED
    assert not sc.waiting(regs(sc.SYS_WAITID, r10=4 | sc.WNOHANG))
