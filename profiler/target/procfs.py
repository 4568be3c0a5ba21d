"""Readers for /proc: process identity, threads, per-thread run time and state.

The per-thread readers keep their file descriptors open and re-read with ``pread``: one syscall per tick
instead of open/read/close. An open /proc/PID/task/TID/... descriptor is bound to that task, so when the
thread exits and its tid is reused, reads fail with ESRCH instead of silently describing the new thread.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass

PF_KTHREAD = 0x00200000  # include/linux/sched.h: "I am a kernel thread"


def read_bytes(path: str) -> bytes | None:
    """Whole file, or None if it (or its process) does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None


def read_text(path: str) -> str | None:
    """Whole file as text, or None if it (or its process) does not exist."""
    data = read_bytes(path)
    return data.decode("utf-8", "replace") if data is not None else None


def printable(text: str) -> str:
    """A string from the file system (``os.fsdecode``'s: each byte that is not UTF-8 kept as a lone
    surrogate, so the path still opens) as text to show and to write: those bytes become U+FFFD. orjson
    and a UTF-8 stream refuse lone surrogates, and a path from the maps is shown in every output."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def split_stat(text: str) -> list[str]:
    """Fields of /proc/.../stat, numbered from 1 as proc(5) does (index 0 is unused).

    comm (field 2) may contain spaces and parentheses, so split after its last ')'.
    """
    lparen = text.index("(")
    rparen = text.rindex(")")
    return ["", text[:lparen].strip(), text[lparen + 1 : rparen], *text[rparen + 2 :].split()]


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    state: str
    uid: int
    tracer_pid: int
    ns_pids: tuple[int, ...]  #: NSpid: the id in each pid namespace, outermost first (the last: its own)
    tgid: int  #: Tgid: the process a thread belongs to (its own id for a main thread)


def read_status(pid: int) -> ProcessStatus | None:
    """/proc/PID/status, of a process or of any of its threads by tid (/proc answers for a tid though it
    does not list it); None if it is gone."""
    text = read_text(f"/proc/{pid}/status")
    if text is None:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return ProcessStatus(
        name=fields.get("Name", ""),
        state=fields.get("State", "?")[:1],
        uid=int(fields.get("Uid", "0").split()[1] if fields.get("Uid") else 0),
        tracer_pid=int(fields.get("TracerPid", "0") or 0),
        ns_pids=tuple(int(p) for p in fields.get("NSpid", str(pid)).split()),
        tgid=int(fields.get("Tgid", "") or pid),
    )


def tracer_process(tracer_tid: int) -> int:
    """The process a thread's TracerPid belongs to (0 for 0: not traced). TracerPid is the id of the tracing
    thread, not of its process, where the tracer traces from a thread of its own (nprof does:
    ``target/tracing_thread.py``); a thread that has just ended is taken for its process."""
    if tracer_tid == 0:
        return 0
    status = read_status(tracer_tid)
    return status.tgid if status is not None else tracer_tid


def tracer_label(tracer_tid: int) -> str:
    """"pid P (name)" for the process that traces a thread, from the thread's TracerPid."""
    pid = tracer_process(tracer_tid)
    return f"pid {pid} ({read_comm(pid) or '?'})"


#: proc(5) states of a task that has exited and only waits to be reaped: zombie, dead. A main thread that
#: called pthread_exit stays a zombie until its process's last thread exits
EXITED_STATES = frozenset("ZX")
#: proc(5) state of a task in uninterruptible sleep ("disk sleep"): it stops for no ptrace request until it
#: wakes, which for a hung program may be never
DISK_SLEEP = "D"


def process_alive(pid: int) -> bool:
    """The process exists and has not exited: a zombie (Z) or dead (X) one only waits to be reaped."""
    status = read_status(pid)
    return status is not None and status.state not in EXITED_STATES


def live_task_dir(pid: int) -> str | None:
    """``/proc/PID/task/TID`` of a thread of ``pid`` other than its main thread, for what a process whose
    main thread has exited (a zombie) no longer shows under ``/proc/PID``: its maps, its root."""
    for tid in list_threads(pid):
        if tid != pid and os.path.exists(f"/proc/{pid}/task/{tid}/root"):
            return f"/proc/{pid}/task/{tid}"
    return None


def is_kernel_thread(pid: int) -> bool:
    text = read_text(f"/proc/{pid}/stat")
    if text is None:
        return False
    return bool(int(split_stat(text)[9]) & PF_KTHREAD)


def list_threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return []


def read_cmdline(pid: int) -> list[str]:
    text = read_text(f"/proc/{pid}/cmdline")
    if not text:
        return []
    return text.rstrip("\0").split("\0")


def read_comm(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/task/{tid}/comm" if tid is not None else f"/proc/{pid}/comm"
    return (read_text(path) or "").strip()


def exe_path(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def target_path(pid: int, path: str) -> str:
    """A path as seen inside the target's mount namespace, opened from ours through /proc/PID/root (a
    live thread's root where the main thread has exited: a zombie has none)."""
    if not path.startswith("/"):
        return path
    root = f"/proc/{pid}/root"
    if not os.path.exists(root):
        task = live_task_dir(pid)
        root = f"{task}/root" if task is not None else root
    return f"{root}{path}"


def children_of(pid: int, tids: Iterable[int]) -> set[int]:
    """The children that the threads ``tids`` of ``pid`` forked and that have not been reaped
    (/proc/PID/task/TID/children, CONFIG_PROC_CHILDREN): a child belongs to the thread that forked it."""
    out: set[int] = set()
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.update(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def led_session(pid: int) -> bool:
    """Whether ``pid`` (alive, or a zombie: its stat stays readable) leads a session: its session id
    (proc(5) stat field 6) is its own pid, as setsid(2) makes it."""
    text = read_text(f"/proc/{pid}/stat")
    return text is not None and int(split_stat(text)[6]) == pid


def session_members(sid: int) -> list[int]:
    """The processes of the session ``sid`` (proc(5) stat field 6), but its leader: a scan of all of /proc,
    for the rare event that needs it. A session's id is its leader's pid, and only processes the leader
    started join it, so these are its descendants, wherever they were reparented since."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == sid:
            continue
        text = read_text(f"/proc/{name}/stat")
        if text is not None and int(split_stat(text)[6]) == sid:
            out.append(int(name))
    return out


def thread_start_time(pid: int, tid: int) -> int | None:
    """Field 22 (starttime, clock ticks since boot): with the tid, a key no reused tid can collide with."""
    text = read_text(f"/proc/{pid}/task/{tid}/stat")
    if text is None:
        return None
    return int(split_stat(text)[22])


class ThreadProc:
    """Open descriptors on one thread's schedstat and stat, re-read each tick with pread."""

    __slots__ = ("_schedstat_fd", "_stat_fd", "_schedstat_bytes", "_schedstat")

    def __init__(self, pid: int, tid: int) -> None:
        base = f"/proc/{pid}/task/{tid}"
        self._schedstat_fd = os.open(f"{base}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._stat_fd = os.open(f"{base}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(self._schedstat_fd)
            raise
        self._schedstat_bytes = b""
        self._schedstat: tuple[int, int] | None = None

    def schedstat(self) -> tuple[int, int] | None:
        """``(run time in ns, timeslices)``: schedstat fields 1 and 3, or None once the thread is gone.

        Field 3 counts how many times the thread was put on a CPU (Documentation/scheduler/sched-stats.rst,
        "pcount"). The kernel bumps it at the switch-in itself, whereas field 1 of a thread that stays on a
        CPU is only brought up to date at a scheduler tick (every 4 ms at HZ=250) or when it leaves the CPU.

        While the file reads the same bytes, the last reading is returned without parsing them again: a
        thread asleep for long costs a pread and a comparison per tick.
        """
        try:
            data = os.pread(self._schedstat_fd, 128, 0)
        except OSError as e:
            if e.errno in (errno.ESRCH, errno.ENOENT):
                self._schedstat = None
                return None
            raise
        if data == self._schedstat_bytes:
            return self._schedstat
        fields = data.split()
        if len(fields) < 3:
            self._schedstat = None
            return None
        self._schedstat_bytes = data
        self._schedstat = value = int(fields[0]), int(fields[2])
        return value

    @property
    def last_schedstat(self) -> tuple[int, int] | None:
        """What the last ``schedstat`` call returned, without reading again."""
        return self._schedstat

    def _stat_from_state(self) -> bytes | None:
        """The thread's stat line from field 3 on (after the command name, which may hold spaces and
        parentheses: proc(5)), or None once the thread is gone."""
        try:
            data = os.pread(self._stat_fd, 512, 0)
        except OSError as e:
            if e.errno in (errno.ESRCH, errno.ENOENT):
                return None
            raise
        return data[data.rindex(b")") + 2 :] if data else None

    def thread_count(self) -> int | None:
        """How many threads the thread's process has (proc(5) stat field 20, num_threads: the same in every
        thread's stat), or None once this thread is gone."""
        rest = self._stat_from_state()
        fields = rest.split() if rest is not None else []
        return int(fields[17]) if len(fields) > 17 else None

    def state(self) -> str | None:
        """The one-letter scheduler state (proc(5) field 3): R running, S sleeping, D disk sleep, T/t stopped."""
        rest = self._stat_from_state()
        return chr(rest[0]) if rest else None

    def exited(self) -> bool:
        """The thread is gone, or has exited and only waits to be reaped (``EXITED_STATES``)."""
        state = self.state()
        return state is None or state in EXITED_STATES

    def close(self) -> None:
        for fd in (self._schedstat_fd, self._stat_fd):
            try:
                os.close(fd)
            except OSError:
                pass
