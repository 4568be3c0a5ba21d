"""Children seized as their parent exits (``--subprocesses``), before its exit hands them to a reaper.

A child whose parent exits at once (a daemon's fork, setsid, fork) is handed to a reaper before any look at
its parent's children (/proc/PID/task/TID/children, every 100 ms) can find it. PTRACE_O_TRACEEXIT stops each
thread at the start of its exit, while its children are still its own (ptrace(2): "stopped early during
process exit"), and the tracer seizes them there (``Orphans.seize_children``); the sampler makes them
processes of their own at its next look (``sampling/processes.py``).

Not PTRACE_O_TRACEFORK, which would attach every child before its first instruction: a child's
PTRACE_TRACEME (a debugger or strace started by the target) would then fail, and a set-user-ID program it
runs would lose its privileges under a tracer without CAP_SYS_PTRACE (execve(2)).
"""

from __future__ import annotations

from profiler.target import procfs
from profiler.target import ptrace as pt
from profiler.target.capture import TracerStats
from profiler.target.threads import SeizedThreads

#: ptrace options of every process a recording with ``--subprocesses`` seizes: its threads stop at their
#: exit (above), and its execs stop it to be mapped (``Tracer.exec_stopped``). A child seized here gets them
#: too, so a daemon's first child, exiting after its own fork, is how its second is found
FOLLOW_OPTIONS = pt.PTRACE_O_TRACEEXEC | pt.PTRACE_O_TRACEEXIT


class Orphans(dict[int, int]):
    """Child pid -> its parent's pid, for each child seized when a thread of its parent began to exit and
    not seized as a process yet (``Tracer.add_process(orphan=True)``): only its leader is traced, and the
    tracer answers its stops like any other's, and detaches it at the end."""

    def __init__(self, seized: SeizedThreads, stats: TracerStats) -> None:
        super().__init__()
        self._seized = seized
        self._stats = stats

    def seize_children(self, pid: int, tid: int) -> None:
        """Thread ``tid`` of ``pid`` is in its exit stop: seize each child it forked that is not traced yet.
        A thread the tracer has no record of is the leader of an orphan, so its pid is its tid.

        A daemon's first child is often past its own exit stop when this one is answered (a C daemon's
        setsid and fork take microseconds), and its child is what matters:
        * seized while still exiting, its children are seized at once too (a Python process's exit frees
          its memory for a millisecond or more before they are handed on: 6 of 8 recordings of a Python
          double fork at 1 kHz followed the daemon without this);
        * exited, it waits as a zombie, its children handed to a reaper already. Having called setsid, it
          led a session, which only its descendants are in: those are seized instead (0 of 10 recordings
          of a C double fork followed the daemon without this).

        Any other refused seize is left to the look for children (a child another tracer has)."""
        for child in procfs.children_of(pid, (tid,)):
            if self._seize(child, pid):
                continue
            status = procfs.read_status(child)
            if status is not None and status.state in procfs.EXITED_STATES and procfs.led_session(child):
                for member in procfs.session_members(child):
                    self._seize(member, child)

    def _seize(self, pid: int, parent: int) -> bool:
        """Seize ``pid`` as an orphan of ``parent``, and the children it has already; True if it is traced
        now (or was already), False if ptrace refused it."""
        if pid in self._seized.processes or pid in self:
            return True
        if pt.seize(pid, FOLLOW_OPTIONS) != 0:
            return False
        self[pid] = parent
        self._stats.orphans_seized += 1
        for child in procfs.children_of(pid, procfs.list_threads(pid)):
            self._seize(child, pid)
        return True
