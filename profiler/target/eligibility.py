"""Whether a pid names a process nprof can profile, answered from /proc alone, before anything is attached.

``TargetProcess`` asks it first, and the command line asks it before it imports the engine, so that a
wrong pid, a kernel thread or a process nprof may not read is answered in the time Python takes to start,
not after the engine's import (0.6 s; docs/decisions/start-up-latency.md). Everything here is definitive:
a process that passes may still refuse the attach, which then says why (``permissions.py``).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

from profiler.errors import NoSuchProcess, TargetError
from profiler.target import procfs
from profiler.target.permissions import diagnose_attach_failure

EM_X86_64 = 62  # ELF gABI e_machine
_EI_CLASS_64 = 2
_MACHINE_NAMES = {3: "i386", 40: "ARM", 183: "AArch64", 243: "RISC-V", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64"}


def check_profilable(pid: int) -> procfs.ProcessStatus:
    """The process's status, if nprof can profile it; else the error that says why: no such process, a
    zombie or a process whose main thread exited, nprof itself, a kernel thread, another architecture, or
    a process whose memory map nprof may not read (the attach's own access rules, ptrace(2) "Ptrace access
    mode checking": its uid, its dumpable flag, a security module)."""
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        raise NoSuchProcess(pid)
    status = procfs.read_status(pid)
    if status is None:
        raise NoSuchProcess(pid)
    if status.state == "Z" and len(procfs.list_threads(pid)) > 1:
        raise TargetError(
            f"Process {pid} ({status.name}): its main thread has exited (it called pthread_exit) while "
            "its other threads run on; ptrace cannot attach to an exited main thread, so nprof cannot "
            "attach to this process.",
            "Start the program under nprof instead (nprof record -- COMMAND), which traces it from its start.",
        )
    if status.state == "Z":
        raise TargetError(
            f"Process {pid} ({status.name}) is a zombie: it has exited and only waits for its "
            "parent to collect its status, so it has no threads to sample.",
        )
    if pid == os.getpid():  # ptrace(2): the kernel refuses to let a thread group trace itself
        raise TargetError(
            f"Process {pid} is this nprof itself; a process cannot trace its own threads.",
            "Give the pid of the program to profile, or start it under nprof: nprof record -- CMD ARGS...",
        )
    if procfs.is_kernel_thread(pid):
        raise TargetError(
            f"Process {pid} ({procfs.read_comm(pid)}) is a kernel thread; nprof samples user-space processes.",
            "To profile the kernel, use `perf record -a -g`.",
        )
    host = platform.machine()
    if host != "x86_64":
        raise TargetError(
            f"nprof runs on x86-64 only; this machine is {host}.",
            "Other architectures need their own register and unwind rules, which nprof does not have yet.",
        )
    problem = executable_architecture(f"/proc/{pid}/exe")
    if problem is not None:
        raise foreign_architecture_error(f"Process {pid} runs", problem)
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            maps.read(1)
    except PermissionError as e:  # proc(5): the same access rules as the attach's, in read mode
        raise diagnose_attach_failure(pid, e.errno or errno.EACCES, reading=f"/proc/{pid}/maps") from None
    except OSError:
        pass  # gone meanwhile, or unreadable another way: the attach says what it is
    return status


def foreign_architecture(header: bytes) -> str | None:
    """Describe the executable's architecture from its ELF header if it is not x86-64, else None.

    e_ident[EI_CLASS] (byte 4) and e_machine (bytes 18-19) per the ELF gABI; a file that is not ELF (a
    script's interpreter is what runs) yields None.
    """
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    (machine,) = struct.unpack_from("<H", header, 18)
    if machine == EM_X86_64 and header[4] == _EI_CLASS_64:
        return None
    name = _MACHINE_NAMES.get(machine, f"e_machine {machine}")
    bits = "64" if header[4] == _EI_CLASS_64 else "32"
    return f"a {bits}-bit {name} executable"


def executable_architecture(path: str) -> str | None:
    """``foreign_architecture`` of the executable at ``path``; None too when it cannot be read (whatever
    runs it next reports that: the exec, or the attach with a diagnosis)."""
    try:
        with open(path, "rb") as f:
            return foreign_architecture(f.read(20))
    except OSError:
        return None


def foreign_architecture_error(subject: str, problem: str) -> TargetError:
    """The error for a program of another architecture: ``subject`` ("Process 12 runs", "prog is")."""
    return TargetError(
        f"{subject} {problem}; nprof profiles x86-64 (64-bit) programs only.",
        "Rebuild the program for x86-64, or use a profiler for its architecture.",
    )
