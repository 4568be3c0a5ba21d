"""Why an attach was refused, in words a user can act on.

ptrace(2) "Ptrace access mode checking" lists the rules: same uid (or CAP_SYS_PTRACE), the target dumpable,
Yama's ptrace_scope, and only one tracer per thread. Containers add a missing CAP_SYS_PTRACE.
"""

from __future__ import annotations

import os

from profiler.errors import PermissionDenied
from profiler.target import procfs

CAP_SYS_PTRACE = 19  # linux/capability.h

_SCOPE_TEXT = {
    1: "kernel.yama.ptrace_scope is 1, so only a process's ancestors may trace it",
    2: "kernel.yama.ptrace_scope is 2, so only processes with CAP_SYS_PTRACE may trace",
    3: "kernel.yama.ptrace_scope is 3, so no process may attach with ptrace until reboot",
}


def has_cap_sys_ptrace() -> bool:
    text = procfs.read_text("/proc/self/status") or ""
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    return False


def ptrace_scope() -> int | None:
    text = procfs.read_text("/proc/sys/kernel/yama/ptrace_scope")
    return int(text) if text and text.strip().isdigit() else None


#: the initial user namespace's inode number, as /proc/PID/ns/user shows it: PROC_USER_INIT_INO in
#: include/linux/proc_ns.h
PROC_USER_INIT_INO = 0xEFFFFFFD


def in_child_user_namespace() -> bool:
    """Whether nprof runs in a user namespace other than the initial one (a rootless container, `unshare -r`):
    its capabilities then count only for processes in that namespace and those below it."""
    try:
        link = os.readlink("/proc/self/ns/user")  # "user:[4026531837]"
    except OSError:
        return False
    return link != f"user:[{PROC_USER_INIT_INO}]"


def in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    cgroup = procfs.read_text("/proc/1/cgroup") or ""
    return any(word in cgroup for word in ("docker", "kubepods", "containerd", "libpod", "lxc"))


def diagnose_attach_failure(pid: int, err: int, reading: str | None = None) -> PermissionDenied:
    """Build the error for a refused PTRACE_SEIZE on ``pid`` (errno ``err``), or with ``reading`` (a path),
    for a refused read of a /proc file that the same access rules guard (proc(5): /proc/PID/maps needs
    "PTRACE_MODE_READ_FSCREDS")."""
    status = procfs.read_status(pid)
    name = status.name if status else "?"
    reasons: list[str] = []
    if status is not None and status.tracer_pid:
        reasons.append(
            f"it is already being traced by {procfs.tracer_label(status.tracer_pid)}; a thread can have only one "
            "tracer, so stop that debugger or profiler first"
        )
    my_uid = os.geteuid()
    capable = has_cap_sys_ptrace()
    if status is not None and status.uid != my_uid and not capable:
        reasons.append(
            f"it belongs to uid {status.uid} and nprof runs as uid {my_uid} without CAP_SYS_PTRACE; run "
            "nprof as that user, or with sudo (which grants CAP_SYS_PTRACE)"
        )
    scope = ptrace_scope()
    if scope in _SCOPE_TEXT and not (scope in (1, 2) and capable):
        reasons.append(
            _SCOPE_TEXT[scope]
            + "; run nprof with sudo (or grant it CAP_SYS_PTRACE), or lower the setting with "
            "`sudo sysctl kernel.yama.ptrace_scope=0`"
        )
    if capable and in_child_user_namespace():
        reasons.append(
            "nprof runs in a user namespace (a rootless container, or `unshare --user`), where its "
            "CAP_SYS_PTRACE counts only for processes inside that namespace, and this process is outside "
            "it; run nprof in the process's namespace, for instance on the host"
        )
    if not capable and not reasons:
        reasons.append(
            "the process may be non-dumpable (setuid, or it called prctl(PR_SET_DUMPABLE, 0)); only a "
            "tracer with CAP_SYS_PTRACE may attach to it, so run nprof with sudo"
        )
    if in_container() and not capable:  # with the capability, the container is not what refused
        reasons.append(
            "nprof runs in a container, which needs the capability: start it with "
            "`docker run --cap-add SYS_PTRACE` (Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])"
        )
    if not reasons:
        reasons.append(
            "a security module (SELinux, AppArmor, seccomp) may forbid ptrace here; check the audit log"
        )
    if reading:
        what = f"Permission denied reading {reading} (process {pid}, {name}), which needs ptrace access:"
    else:
        what = f"Permission denied attaching to process {pid} ({name}) with ptrace ({os.strerror(err)}):"
    return PermissionDenied(
        what,
        "; ".join(reasons) + ".",
    )
