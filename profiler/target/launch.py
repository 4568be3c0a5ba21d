"""Starting a command under nprof so that its first instruction is sampled (``nprof record -- CMD``).

A command started with ``subprocess`` runs free while nprof attaches to it: reading its maps and opening its
ELF files takes tens of milliseconds, so the start of the program, often what the user wants to see (its
imports, its set-up), was never sampled. Here, as perf does for its workload, the command is forked and
held before its exec: the child waits on a pipe (the gate) until nprof has seized it with
PTRACE_O_TRACEEXEC, then execs. The kernel stops it after the exec and before the new program's first
instruction (PTRACE_EVENT_EXEC, ptrace(2)), and it waits there while nprof maps it; the sampler resumes it.

The child runs a few lines of Python between the fork and the exec: the signal dispositions reset as
``subprocess`` resets them (and SIGINT's and SIGTERM's, which nprof handles), a read of the gate,
``os.execvp``. None takes a lock another thread of nprof could hold (the tracing thread only waits for its
next step; numpy's BLAS workers only wait on their own condition variables; glibc's fork keeps malloc
usable in the child), so the fork is safe although nprof has threads. If the exec fails, the child writes
its errno to a close-on-exec pipe and exits: an empty pipe means the exec happened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import threading
import time
import warnings
from collections.abc import Collection, Iterable, Sequence

from profiler.errors import PermissionDenied, TargetError, UsageError
from profiler.target import ptrace as pt
from profiler.target.eligibility import executable_architecture, foreign_architecture_error
from profiler.target.permissions import diagnose_attach_failure, has_cap_sys_ptrace

#: the exit status of a child whose exec failed, as a POSIX shell gives a command it cannot run; what it
#: failed with goes to the parent through the report pipe
EXEC_FAILED = 127

#: the signals that stop nprof (``cli/stop.StopFlag``); the child takes their default action before its exec,
#: as the command would: killed by the Ctrl-C that ends nprof's set-up, it never starts
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: signals Python ignores at its start and ``subprocess`` gives back their default action in a child
#: (``restore_signals``, Lib/subprocess.py): a command run by nprof must die of SIGPIPE as it would in a shell
_RESTORED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))


class LaunchedCommand:
    """A command nprof forked, held before its exec until ``run_to_exec``."""

    def __init__(
        self,
        command: Sequence[str],
        ignored: Collection[int] | None = None,
        mask: Iterable[int] | None = None,
        nice: int | None = None,
    ) -> None:
        """Fork ``command``, held at its gate until ``seize``, then ``run_to_exec``. ``ignored``: the stop
        signals (SIGINT, SIGTERM) it starts with ignored, as nprof was started (a script's background job
        ignores SIGINT), when a handler of nprof's has taken their place since (default: those ignored now).
        ``mask``: the signals it starts with blocked, as nprof was started (default: this thread's mask now):
        while the tracing thread runs, the main thread blocks SIGCHLD, which an exec would pass on.
        ``nice``: the nice value it execs with, as nprof was started (default: nprof's now), when nprof has
        raised its own since (``sampling/niceness.py``)."""
        if threading.current_thread() is not threading.main_thread():
            # Forked by the tracing thread, the command's first samples lacked their Python frames more
            # often: 41-50 threads of tests/targets/python/early_sleepers.py (one sample each) in 2 of 5
            # recordings, against none in 5 forked here; why, this was not found out
            raise RuntimeError("a command is launched from the main thread")
        self.command = list(command)
        _refuse_unrunnable(self.command[0])
        if ignored is None:
            ignored = [sig for sig in _STOP_SIGNALS if signal.getsignal(sig) == signal.SIG_IGN]
        self.returncode: int | None = None  #: once known: the exit code, or minus the killing signal
        gate_r, self._gate = os.pipe()  # both ends close-on-exec (PEP 446)
        self._report, report_w = os.pipe()
        # SIGINT and SIGTERM are blocked across the fork: one that reaches the child before it has reset them
        # then kills it, as it would kill the command, instead of running its copy of nprof's handler
        own_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        child_mask = set(own_mask if mask is None else mask)
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns about fork in a process with threads; the child only execs (module docstring)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: never returns
                _exec_when_released(gate_r, self._gate, self._report, report_w, self.command, child_mask, ignored,
                                    nice)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, own_mask)
        os.close(gate_r)
        os.close(report_w)
        self.pid = pid
        self._seize_error = errno.ESRCH  #: the errno of ``seize``; 0 once seized

    def seize(self) -> None:
        """Seize the child at its gate with PTRACE_O_TRACEEXEC, on the thread that traces (a tracee is the
        seizing thread's, ``tracing_thread.py``), at once after the fork: nprof builds its sampler before
        ``run_to_exec`` releases the child (40-50 ms here), and a tracer following children took the child
        in that time (nprof's own tests, run by an nprof with --subprocesses: "already being traced" in 2 of
        3 daemon tests), and once in a full test run where the tracing thread was started between the fork
        and the seize."""
        self._seize_error = pt.seize(self.pid, pt.PTRACE_O_TRACEEXEC)

    def run_to_exec(self) -> None:
        """Let the child, seized at its fork, exec, and return once it waits in its exec stop, seized by this
        thread with PTRACE_O_TRACEEXEC. Raises UsageError when the command cannot run (not found, not
        executable), PermissionDenied when ptrace was refused (the command is then never started)."""
        err = self._seize_error
        if err:
            if err == errno.EPERM:
                error = diagnose_attach_failure(self.pid, err)
            else:
                error = PermissionDenied(f"PTRACE_SEIZE of the command nprof started failed: {os.strerror(err)}.")
            self._close_gate()  # the child reads end-of-file and exits without starting the command
            self.wait()
            raise error
        os.write(self._gate, b"\x01")
        self._close_gate()
        while True:
            _, status = os.waitpid(self.pid, pt.WALL)
            if not pt.is_stopped(status):
                self._exited(status)
                raise self._exec_failure()
            sig, event = pt.decode_stop(status)
            if event == pt.PTRACE_EVENT_EXEC:
                self._close_report()
                return
            pt.pass_on(self.pid, sig, event)  # a signal, or Ctrl-Z, before the exec

    def give_up(self) -> None:
        """nprof cannot record after all (an error, Ctrl-C during the set-up). A command not yet released
        never starts: the child reads end-of-file at its gate and exits. One already held in its exec stop
        is detached and runs on, unprofiled, as it would have without nprof (harmless once the tracer
        detached it: ESRCH)."""
        if self._gate >= 0:
            self._close_gate()
            self.wait()
        elif self._seize_error == 0:
            pt.detach(self.pid, 0)
        self._close_report()

    def running(self) -> bool:
        """Whether the command still runs; one that has exited is reaped."""
        if self.returncode is not None:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False  # reaped already: by the tracer's wait while it was traced
        if pid == 0:
            return True
        self._exited(status)
        return False

    def exits_within(self, seconds: float) -> bool:
        """Whether the command exits (and is reaped) within ``seconds``, polled every 10 ms; a Ctrl-C in
        that time ends the wait early."""
        end = time.monotonic() + seconds
        try:
            while self.running():
                if time.monotonic() >= end:
                    return False
                time.sleep(0.01)
        except KeyboardInterrupt:
            return not self.running()
        return True

    def wait(self) -> None:
        """Block until the command exits, and reap it. Still seized (a child never released, ``give_up``), it
        may stop first (a signal: a terminal's Ctrl-C reaches the whole process group): it is detached from
        that stop, with its signal, and waited for as the plain child it then is."""
        while True:
            try:
                _, status = os.waitpid(self.pid, pt.WALL)
            except ChildProcessError:
                return
            if not pt.is_stopped(status):
                self._exited(status)
                return
            sig, event = pt.decode_stop(status)
            pt.detach(self.pid, sig if event == 0 else 0)

    # --- internals --------------------------------------------------------------------------------------

    def _exited(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)

    def _close_report(self) -> None:
        if self._report >= 0:
            os.close(self._report)
            self._report = -1

    def _close_gate(self) -> None:
        if self._gate >= 0:
            os.close(self._gate)
            self._gate = -1

    def _exec_failure(self) -> Exception:
        """Why the child ended before its exec: the errno it reported, else the signal that killed it."""
        report = os.read(self._report, 64)
        self._close_report()
        name = self.command[0]
        if report:
            code = int(report)
            if code == errno.ENOENT:
                return UsageError(f"Command not found: {name}.", "Check the name and your PATH.")
            if code == errno.EACCES:
                return UsageError(f"Command not executable: {name}.", "Check its permissions.")
            return UsageError(f"Cannot run {name}: {os.strerror(code)}.")
        status = self.returncode
        how = f"was killed by signal {-status}" if status is not None and status < 0 else f"exited ({status})"
        return TargetError(f"{name} {how} before it started.")


def _refuse_unrunnable(name: str) -> None:
    """Refuse, before anything runs, a command that would not run as asked under a tracer (a PATH search,
    as the exec makes; one that cannot be found or read is left to the exec to report):

    * a set-user-ID or set-group-ID program execs without its privileges while traced, unless the tracer
      has CAP_SYS_PTRACE (execve(2), "ptrace"; the kernel's ``ptracer_capable``): it would fail, or run as
      another program than the user asked for;
    * a program of another architecture (a 32-bit i386 build): found only at its exec stop, it was resumed
      there, and ran on unprofiled in the background once nprof had exited with its error. (A script's
      ``#!`` interpreter is not followed here; the exec stop still lets go of what it runs.)"""
    path = shutil.which(name) if os.sep not in name else name
    try:
        mode = os.stat(path).st_mode if path else 0
    except OSError:
        return
    if mode & (stat.S_ISUID | stat.S_ISGID) and not has_cap_sys_ptrace():
        kind = "set-user-ID" if mode & stat.S_ISUID else "set-group-ID"
        raise UsageError(
            f"{name} is a {kind} program: started under ptrace, it would run without its privileges.",
            "Run nprof as root or with CAP_SYS_PTRACE: only such a tracer may trace a program that runs "
            "with another user's privileges.",
        )
    problem = executable_architecture(path) if path else None
    if problem is not None:
        raise foreign_architecture_error(f"{name} is", problem)


def _exec_when_released(
    gate_r: int,
    gate_w: int,
    report_r: int,
    report_w: int,
    argv: list[str],
    mask: set[int],
    ignored: Collection[int],
    nice: int | None,
) -> None:
    """The child's side: the stop signals nprof handles take their default action, or stay ignored
    (``ignored``), and are unblocked (``mask``: nprof's signal mask before the fork); then wait for the
    gate, take ``nice`` (nprof's own before it raised it), and exec ``argv`` (a PATH search, as
    ``subprocess`` does). On failure, report the errno and exit.
    Runs nothing that could raise past it: a child must never return into nprof's code."""
    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(gate_w)
        os.close(report_r)
        if os.read(gate_r, 1) != b"\x01":
            os._exit(EXEC_FAILED)  # the gate closed unopened: nprof could not trace the command, or died
        for sig in _RESTORED_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        if nice is not None:
            with contextlib.suppress(OSError):  # (lowering one's own priority is always permitted)
                os.setpriority(os.PRIO_PROCESS, 0, nice)
        os.execvp(argv[0], argv)
    except OSError as e:
        try:
            os.write(report_w, str(e.errno or errno.EIO).encode())
        except BaseException:
            pass
    except BaseException:
        pass
    finally:
        os._exit(EXEC_FAILED)
