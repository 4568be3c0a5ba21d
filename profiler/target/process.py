"""A target process: identity checks before attaching, memory reads, and paths in its mount namespace."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

from profiler.target import procfs
from profiler.target.eligibility import check_profilable, executable_architecture
from profiler.target.libc import syscall
from profiler.target.maps import Mapping, MappingIndex, executable_lines, read_maps
from profiler.target.permissions import diagnose_attach_failure
from profiler.target.ptrace import StackReader

#: kcmp(2): its x86-64 system call number (arch/x86/entry/syscalls/syscall_64.tbl; glibc has no wrapper),
#: and KCMP_VM from linux/kcmp.h: "do the two processes share one address space"
SYS_KCMP = 312
KCMP_VM = 1

def shares_memory(pid: int, child: int) -> bool:
    """Whether ``child`` runs in ``pid``'s address space: a vfork child before its exec (``subprocess`` and
    ``posix_spawn`` make these), or a clone with CLONE_VM. Its memory, stack and runtime state are the
    parent's until it execs. False where kcmp cannot tell (a kernel without it: ENOSYS)."""
    args = (SYS_KCMP, pid, child, KCMP_VM, 0, 0)
    return bool(syscall(*(ctypes.c_long(a) for a in args)) == 0)


class TargetProcess:
    """One process nprof samples. Construction validates that it can be profiled at all."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        #: stopped by job control (SIGSTOP, SIGTSTP, Ctrl-Z) when first looked at: once seized, its threads
        #: show as in a tracing stop (proc(5) "t") instead, and nprof leaves them stopped
        self.job_stopped = check_profilable(pid).state == "T"
        self.cmdline = procfs.read_cmdline(pid)
        self.comm = procfs.read_comm(pid)
        self.exe = procfs.exe_path(pid) or ""
        self._reader = StackReader(pid)
        #: the id whose memory ``read`` goes through: the process's own, or once its main thread has exited
        #: (pthread_exit, while its other threads run on) one of those threads: the zombie main thread has
        #: no memory any more (process_vm_readv of its id: ESRCH), and a 3.12 Python whose main thread had
        #: left lost its Python frames in 179 of 226 samples (a sweep)
        self.memory_pid = pid
        #: told the new ``memory_pid`` when it changes (an agent's own readers)
        self.memory_pid_changed: list[Callable[[int], None]] = []
        self._scratch = ctypes.create_string_buffer(1 << 16)
        try:
            self.maps = MappingIndex(read_maps(pid))
        except PermissionError as e:  # the attach's own rules, checked first (a non-dumpable process, an LSM)
            raise diagnose_attach_failure(pid, e.errno or errno.EACCES, reading=f"/proc/{pid}/maps") from None

    # --- views ------------------------------------------------------------------------------------------

    def foreign_architecture(self) -> str | None:
        """What the program the process runs is, if not x86-64 (``executable_architecture``)."""
        return executable_architecture(f"/proc/{self.pid}/exe")

    @property
    def root_path(self) -> str:
        """The process's root directory as nprof opens it: ``/proc/PID/root`` (its chroot, its container's
        file system)."""
        return f"/proc/{self.pid}/root"

    def host_path(self, path: str) -> str:
        """Open a path from the target's maps in nprof's namespace (via /proc/PID/root)."""
        return procfs.target_path(self.pid, path)

    def mapped_file_path(self, mapping: Mapping) -> str:
        """A path in nprof's namespace to the very file a mapping maps: the first of the target's path under
        /proc/PID/root and the path as written whose inode is the mapping's, else /proc/PID/map_files
        (which needs CAP_SYS_ADMIN), else the first.

        The maps give paths as the *reader* resolves them: a process in another mount namespace (a
        container) has its files under /proc/PID/root, but a chroot'ed one has them at the path as
        written (the chroot's directory included), and under /proc/PID/root not at all: every frame of a
        chroot'ed Python was unnamed. A path may also lead to another file than the one mapped (a mount over
        it since, in the target's namespace or ours): its inode tells them apart. A deleted file is read
        through map_files."""
        by_map = f"/proc/{self.pid}/map_files/{mapping.start:x}-{mapping.end:x}"
        if mapping.deleted:
            return by_map
        rooted = self.host_path(mapping.path)
        for candidate in (rooted, mapping.path) if rooted != mapping.path else (rooted,):
            try:
                if os.stat(candidate).st_ino == mapping.inode:
                    return candidate
            except OSError:
                continue
        try:
            os.stat(by_map)
            return by_map
        except OSError:
            return rooted

    def after_exec(self) -> None:
        """The same pid now runs another program: read what names it again."""
        self.cmdline = procfs.read_cmdline(self.pid)
        self.comm = procfs.read_comm(self.pid)
        self.exe = procfs.exe_path(self.pid) or ""
        self.refresh_maps()

    def refresh_maps(self) -> MappingIndex:
        self.maps = MappingIndex(read_maps(self.pid))
        return self.maps

    def code_map_lines(self) -> bytes | None:
        """The lines of the maps that map code, unparsed (``maps.executable_lines``): a cheap test of change."""
        return executable_lines(self.pid)

    def alive(self) -> bool:
        return procfs.process_alive(self.pid)

    def read(self, addr: int, size: int) -> bytes:
        """Target memory (process_vm_readv); shorter than ``size`` where the mapping ends, b"" on error."""
        if size > len(self._scratch):
            self._scratch = ctypes.create_string_buffer(size)
        n = self._reader.read_into(ctypes.addressof(self._scratch), addr, size, self.memory_pid)
        if n == -errno.ESRCH and self._read_through_a_live_thread():
            n = self._reader.read_into(ctypes.addressof(self._scratch), addr, size, self.memory_pid)
        if n <= 0:
            return b""
        return ctypes.string_at(ctypes.addressof(self._scratch), n)

    def _read_through_a_live_thread(self) -> bool:
        """Point ``memory_pid`` at a thread of the process that is alive, if the one it names has exited."""
        for tid in procfs.list_threads(self.pid):
            status = procfs.read_status(tid)
            if tid != self.memory_pid and status is not None and status.state not in procfs.EXITED_STATES:
                self.memory_pid = tid
                for tell in self.memory_pid_changed:
                    tell(tid)
                return True
        return False
