"""The threads nprof has seized, by process: seized as they appear, forgotten as they exit.

A process is seized thread by thread (ptrace works on threads): its leader when it is added, every other
thread when ``sync`` finds it in ``/proc/PID/task``, each with the process's ptrace options (ptrace options
belong to a thread). No thread is seized with PTRACE_O_EXITKILL, so if nprof dies the kernel detaches them
all and the target runs on (DESIGN.md section 5).

Which processes are still alive is kept up to date here as threads come and go (``live_pids``), because the
sampler asks on every tick.
"""

from __future__ import annotations

import errno
import os

from profiler.errors import NoSuchProcess, PermissionDenied, TargetError
from profiler.target import ptrace as pt
from profiler.target.capture import SeizedThread, TracerStats
from profiler.target.permissions import diagnose_attach_failure
from profiler.target.process import TargetProcess
from profiler.target.procfs import EXITED_STATES, ThreadProc, list_threads, read_comm, read_status, thread_start_time


class SeizedThreads:
    """Every thread nprof has seized and not yet seen exit, and the liveness of their processes."""

    def __init__(self, stats: TracerStats) -> None:
        self.stats = stats
        self.processes: dict[int, TargetProcess] = {}
        self.records: dict[int, SeizedThread] = {}  #: tid -> the thread's record
        #: pid -> its threads not gone, for each process with such a thread and a leader that has not
        #: exited (the sampler asks which processes are alive every tick)
        self.live_pids: dict[int, int] = {}
        self.exit_status: dict[int, int] = {}  #: pid -> raw wait status of a leader that exited
        self.options: dict[int, int] = {}  #: pid -> the ptrace options its threads are seized with
        #: tid -> start time of a live thread whose seize was refused: another tracer has it (strace -p TID,
        #: a debugger). Not tried again at every look for new threads; told at the end
        self.refused: dict[int, int] = {}

    def add_process(self, process: TargetProcess, options: int = 0, seized: bool = False) -> None:
        """Seize the leader of ``process`` with ``options`` (``seized``: it was seized so already, by
        ``launch.py``), then every other thread. Raises PermissionDenied with a diagnosis if refused,
        NoSuchProcess or TargetError if the process is gone or going."""
        self.options[process.pid] = options
        if seized:
            self._add_seized(process)
            return
        if not list_threads(process.pid):
            raise NoSuchProcess(process.pid)
        err = pt.seize(process.pid, options)
        if err and not process.alive():
            # ptrace refuses (EPERM) a process that is already exiting
            raise TargetError(f"Process {process.pid} ({process.comm}) exited while nprof was attaching.")
        if err == errno.EPERM:
            raise diagnose_attach_failure(process.pid, err)
        if err == errno.ESRCH:
            raise NoSuchProcess(process.pid)
        if err:
            raise PermissionDenied(f"PTRACE_SEIZE of process {process.pid} failed: {os.strerror(err)}.")
        self._add_seized(process)

    def _add_seized(self, process: TargetProcess) -> None:
        self.processes[process.pid] = process
        self._track(process.pid, process.pid, seized=True)
        self.sync(process.pid)

    def sync(self, pid: int) -> list[SeizedThread]:
        """Seize the threads of ``pid`` that appeared since the last call; return its live records."""
        live = []
        refused = self.refused
        for tid in list_threads(pid):
            record = self.records.get(tid)
            if record is None:
                if tid in refused and refused[tid] == thread_start_time(pid, tid):
                    continue  # (a new thread that reuses its tid has another start time)
                record = self._track(pid, tid, seized=False)
            if record is not None and not record.gone:
                live.append(record)
        return live

    def may_have_new(self, pid: int, records: list[SeizedThread]) -> bool:
        """Whether ``pid`` may have a thread that ``records``, its last ``sync``, lacks.

        Listing /proc/PID/task costs ~0.45 us a thread in the kernel (0.9 ms for 2,000), reading the thread
        count (``ThreadProc.thread_count``) one read. Every thread but the leader is tracked through a
        listing, and one that exits is dropped as its exit is reaped, while the kernel counts it until it is
        reaped too: so a count equal to the threads held alive, all of them in ``records``, means no thread
        is new."""
        if not records or records[0].gone or len(records) != self.live_pids.get(pid):
            return True
        return records[0].proc.thread_count() != len(records)

    def _track(self, pid: int, tid: int, seized: bool) -> SeizedThread | None:
        if not seized:
            err = pt.seize(tid, self.options.get(pid, 0))
            if err:
                start = thread_start_time(pid, tid)
                if err == errno.EPERM and start is not None and _traced(tid):  # alive, another tracer has it
                    self.refused[tid] = start
                return None  # else exited already (ESRCH)
        start = thread_start_time(pid, tid)
        try:
            proc = ThreadProc(pid, tid)
        except OSError:
            start = None
        if start is None:
            return None  # seized but already gone: its exit is reaped like any other event
        record = SeizedThread(pid, tid, start, read_comm(pid, tid), proc)
        self.records[tid] = record
        if pid not in self.exit_status:
            self.live_pids[pid] = self.live_pids.get(pid, 0) + 1
        self.stats.threads_seen += 1
        return record

    def drop(self, record: SeizedThread, exited: bool = True) -> None:
        """Forget a thread that exited (or, ``exited`` False, was detached); its process is dead once its last
        thread is."""
        if not record.gone:
            record.gone = True
            record.proc.close()
            self.stats.threads_exited += exited
            live = self.live_pids.pop(record.pid, 0) - 1  # absent: the process is counted dead already
            if live > 0:
                self.live_pids[record.pid] = live
        self.records.pop(record.tid, None)

    def threads_of(self, pid: int) -> list[SeizedThread]:
        """The records of ``pid``'s threads seized and not seen to exit (no new thread is looked for)."""
        return [r for r in self.records.values() if r.pid == pid]

    def forget_process(self, pid: int) -> None:
        """Forget a process whose threads were all detached (``drop`` each first): not one of nprof's any more."""
        self.processes.pop(pid, None)
        self.options.pop(pid, None)
        self.live_pids.pop(pid, None)

    def process_alive(self, pid: int) -> bool:
        return pid in self.live_pids

    def leader_exited(self, pid: int, status: int) -> None:
        """The process is dead once its leader has exited, whatever threads are still being reaped."""
        self.exit_status[pid] = status
        self.live_pids.pop(pid, None)


def _traced(tid: int) -> bool:
    """Whether a thread whose seize was refused (EPERM) has another tracer, rather than having exited: ptrace
    refuses a task that is a zombie too (``ptrace_attach``, kernel/ptrace.c: ``task->exit_state``), and a
    child process that exited waits as one until its parent reaps it. Taken for traced, such a zombie was
    named in the end-of-recording notice about threads another tracer had (3 of 3 recordings of a
    multiprocessing pool started with "spawn", --subprocesses)."""
    status = read_status(tid)
    return status is not None and status.tracer_pid != 0 and status.state not in EXITED_STATES

