"""The ptrace binding layer: python-ptrace for the register struct and constants; ctypes for the calls
(python-ptrace lacks SEIZE, INTERRUPT, LISTEN, waitpid with EINTR visible and process_vm_readv, and its
binding of ptrace itself costs ~450 ns more per call than this one, see "The calls" below).

Why not python-ptrace's higher layers (``../shared/reference/ptrace-costs.md`` section 2): its
``PtraceDebugger`` wait loop raises on the PTRACE_EVENT_STOP that INTERRUPT produces, and ``readBytes`` goes
through /proc/PID/mem into fresh bytes; both are slower and neither is needed.

Every call here is a thin wrapper: errors come back as errno values, never as exceptions, because the
capture loop treats ESRCH ("thread gone") as data.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
import signal

from ptrace.binding.func import (
    PTRACE_CONT,
    PTRACE_DETACH,
    PTRACE_EVENT_EXEC,
    PTRACE_EVENT_EXIT,
    PTRACE_GETREGS,
    PTRACE_O_TRACEEXEC,
    PTRACE_O_TRACEEXIT,
    PTRACE_SETOPTIONS,
)
from ptrace.binding.linux_struct import user_regs_struct

from profiler.target.libc import libc

__all__ = [
    "PTRACE_CONT",
    "PTRACE_DETACH",
    "PTRACE_EVENT_EXEC",
    "PTRACE_EVENT_EXIT",
    "PTRACE_GETREGS",
    "PTRACE_O_TRACEEXEC",
    "PTRACE_O_TRACEEXIT",
    "PTRACE_SETOPTIONS",
    "user_regs_struct",
]

# linux/ptrace.h; python-ptrace 0.9.9 has no names for these (ptrace-costs.md section 2)
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_LISTEN = 0x4208
PTRACE_EVENT_STOP = 128

# linux/wait.h: wait for all children, clone or not; tracees that are threads are "clone" children
WALL = 0x40000000
WNOHANG = 1

#: signals whose delivery starts a group-stop (signal(7), "Stop" action)
STOP_SIGNALS = frozenset({signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU})

# The calls. The capture loop makes them with a thread stopped, several per stop, so they are bound without
# ``argtypes``: ctypes then passes a Python int as a C int (libffi's x86-64 call, src/x86/ffi64.c,
# sign-extends it to the 64-bit register, so 0 arrives as a null pointer; checked here: a bare ``labs(-5)``
# returns 5) and a ctypes pointer, array or buffer as its address, and runs no
# converter per argument. The converters cost 100-150 ns per argument per call here, measured with
# ``timeit`` (warm): ptrace with python-ptrace's four c_ulong argtypes 1240 ns, without 790 ns; waitpid
# 1240 -> 650 ns (with ``Waiter.wait`` around it); process_vm_readv of 4 KiB 3230 -> 2370 ns (with
# ``StackReader.read_into``); sigtimedwait (events.py) 810 -> 580 ns. So every argument must be an int that
# fits a C int (requests, tids, flags, counts, sizes, signals) or a ctypes object: an address passed as an
# int raises ``ctypes.ArgumentError``, it cannot be silently truncated.

#: long ptrace(request, pid, addr, data); -1 on failure, with the reason in ``ctypes.get_errno()``
raw_ptrace = libc.ptrace
raw_ptrace.restype = ctypes.c_long

#: int waitpid(pid, int *status, options)
raw_waitpid = libc.waitpid
raw_waitpid.restype = ctypes.c_int


class iovec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


#: ssize_t process_vm_readv(pid, local iovecs, count, remote iovecs, count, flags); also the CPython agent's
#: scatter reads (agents/cpython/scatter.py, plan.py), which pass their iovecs as u64 pairs
raw_process_vm_readv = libc.process_vm_readv
raw_process_vm_readv.restype = ctypes.c_ssize_t

_get_errno = ctypes.get_errno

#: What ``raw_ptrace`` returns on failure. The capture loop calls it bare, ``raw_ptrace(...) == FAILED``
#: (errno then says why, via ``ctypes.get_errno``): each Python frame around a syscall is paid while the
#: thread is stopped. Everywhere else, use the wrappers below.
FAILED = -1


def ptrace(request: int, tid: int, addr: object = 0, data: object = 0) -> int:
    """Raw ptrace; returns 0 on success or the errno, never raises: ESRCH is an everyday event for a
    sampler. ``addr`` and ``data`` are ints that fit a C int, or ctypes pointers (see "The calls")."""
    if raw_ptrace(request, tid, addr, data) == FAILED:
        return _get_errno()
    return 0


def seize(tid: int, options: int = 0) -> int:
    # No PTRACE_O_EXITKILL: if nprof dies, the kernel detaches and the target runs on (DESIGN.md section 5).
    return ptrace(PTRACE_SEIZE, tid, 0, options)


def interrupt(tid: int) -> int:
    return ptrace(PTRACE_INTERRUPT, tid, 0, 0)


def cont(tid: int, sig: int = 0) -> int:
    return ptrace(PTRACE_CONT, tid, 0, sig)


def listen(tid: int) -> int:
    """Leave a group-stopped tracee stopped, as job control wants, while keeping it traced."""
    return ptrace(PTRACE_LISTEN, tid, 0, 0)


def pass_on(tid: int, sig: int, event: int) -> None:
    """Let a tracee go from a stop nprof did not ask for, exactly as if nprof were not there: a group-stop
    stays stopped for job control (PTRACE_LISTEN), a signal is delivered, any other stop continues.
    ``sig`` and ``event`` as ``decode_stop`` gives them."""
    if event == PTRACE_EVENT_STOP and sig in STOP_SIGNALS:
        listen(tid)
    elif event == 0:  # a signal-delivery-stop
        cont(tid, sig)
    else:
        cont(tid)


def set_options(tid: int, options: int) -> int:
    """Change a tracee's ptrace options; it must be in a ptrace-stop (ptrace(2), PTRACE_SETOPTIONS)."""
    return ptrace(PTRACE_SETOPTIONS, tid, 0, options)


def detach(tid: int, sig: int = 0) -> int:
    return ptrace(PTRACE_DETACH, tid, 0, sig)


def reap(tid: int) -> None:
    """Take the exit status of the exited tracee ``tid``, if it is ready, without blocking (wait(2))."""
    try:
        os.waitpid(tid, WALL | WNOHANG)
    except ChildProcessError:
        pass  # reaped already, or not a tracee of this thread


class Waiter:
    """``waitpid(-1, __WALL)`` through ctypes, so that EINTR comes back to the caller.

    ``os.waitpid`` retries on EINTR (PEP 475) and runs Python signal handlers in between, where an exception
    could discard a reaped status and leave a tracee stopped forever. Here a signal only makes ``wait``
    return ``(-1, 0)`` with ``errno == EINTR``; the caller decides.
    """

    __slots__ = ("_status", "_status_ref")

    def __init__(self) -> None:
        self._status = ctypes.c_int(0)
        self._status_ref = ctypes.byref(self._status)

    def wait(self, nohang: bool = False) -> tuple[int, int, int]:
        """Return ``(tid, status, errno)``; tid is 0 with WNOHANG and nothing ready, -1 on error."""
        if nohang:
            # A wait that cannot sleep cannot be interrupted either (the kernel's do_wait only returns
            # -ERESTARTSYS before sleeping), so ``os.waitpid`` never retries it or runs a signal handler in
            # it; being a builtin, it costs ~450 ns less than the ctypes call (timeit, with a live child).
            try:
                tid, status = os.waitpid(-1, WALL | WNOHANG)
            except ChildProcessError:
                return -1, 0, errno_mod.ECHILD
            return tid, status, 0
        tid = raw_waitpid(-1, self._status_ref, WALL)
        if tid < 0:
            return -1, 0, _get_errno()
        return tid, self._status.value, 0


class StackReader:
    """process_vm_readv into a caller-owned buffer: one syscall, no allocation.

    Partial reads are normal: the kernel stops at the first unmapped page, so a window that runs past the
    end of a mapping yields the bytes up to it (verified here: a 16 KiB read near the top of the main
    stack returned the 10 KiB that were mapped).

    The two iovecs are flat u64 pairs: setting a u64 array item costs ~60 ns, a ctypes struct field ~300 ns.
    """

    __slots__ = ("_pid", "_local", "_remote")

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._local = (ctypes.c_uint64 * 2)()  #: struct iovec {void *iov_base; size_t iov_len;}
        self._remote = (ctypes.c_uint64 * 2)()

    def read_into(self, buffer_address: int, addr: int, size: int, tid: int = 0) -> int:
        """Copy ``size`` bytes at target ``addr`` to ``buffer_address``; return bytes read or -errno. With
        ``tid``, through that thread of the process: a process whose main thread has exited has no memory
        to read through its pid any more."""
        local, remote = self._local, self._remote
        local[0] = buffer_address
        local[1] = remote[1] = size
        remote[0] = addr
        n = raw_process_vm_readv(tid or self._pid, self._local, 1, self._remote, 1, 0)
        return n if n >= 0 else -_get_errno()


def decode_stop(status: int) -> tuple[int, int]:
    """Split a stopped wait status into ``(signal, ptrace event)`` (ptrace(2), "Stopped states")."""
    return (status >> 8) & 0xFF, (status >> 16) & 0xFFFF


def is_stopped(status: int) -> bool:
    return (status & 0xFF) == 0x7F

