"""The tracer's guarantees, checked from outside through /proc: what is stopped is resumed, always."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from elftools.elf.elffile import ELFFile

from profiler.model import DW_RA, DW_RSP
from profiler.sampling.stacks import dwarf_registers
from profiler.target.capture import TracerStats
from profiler.target.process import TargetProcess
from profiler.target.procfs import read_status
from profiler.target.ptrace import PTRACE_INTERRUPT, raw_ptrace
from profiler.target.threads import SeizedThreads
from profiler.target.tracer import Tracer
from profiler.unwind.sigframe import at_handler_entry, interrupted_registers
from profiler.unwind.stack import StackWindow
from tests.support.targets import assert_running_free, running_target, thread_states, wait_until


def test_hold_stops_every_thread_and_always_resumes(threads_fp):
    with running_target([threads_fp]) as target:
        tracer = Tracer(stack_bytes=16384)
        try:
            tracer.add_process(TargetProcess(target.pid))
            records = tracer.seized.sync(target.pid)
            assert len(records) == 4
            with pytest.raises(RuntimeError):
                with tracer.hold(records) as captures:
                    assert len(captures) == 4
                    states = thread_states(target.pid)
                    assert all(state == "t" for state, _tracer in states.values()), states
                    assert all(c.stack_len > 0 for c in captures)
                    raise RuntimeError("a failure while the threads are held")
            assert wait_until(lambda: all(s != "t" for s, _t in thread_states(target.pid).values()))
            captures = tracer.capture(records)
            assert {c.thread.tid for c in captures} == {r.tid for r in records}
        finally:
            tracer.detach_all()
        assert_running_free(target.pid)


def test_capture_of_an_exited_thread_is_not_an_error(churn_fp):
    with running_target([churn_fp]) as target:
        tracer = Tracer()
        try:
            tracer.add_process(TargetProcess(target.pid))
            deadline = time.monotonic() + 10
            # threads exit between listing and interrupting them, all the time: capture until some did
            while tracer.stats.threads_exited < 8 and time.monotonic() < deadline:
                tracer.capture(tracer.seized.sync(target.pid))
                tracer.answer_events()
            assert tracer.stats.threads_exited >= 8
        finally:
            tracer.detach_all()
        assert_running_free(target.pid)


def test_detach_reaps_threads_that_exited_unreaped(churn_fp):
    """A seized thread that exits stays a zombie until nprof reaps it, and its process cannot be reported
    exited before: the detach must reap the ones whose exit no wait took yet (a launched command was
    otherwise waited for for ever)."""
    with running_target([churn_fp]) as target:
        tracer = Tracer()
        exited: set[int] = set()
        try:
            tracer.add_process(TargetProcess(target.pid))
            deadline = time.monotonic() + 10
            while not exited and time.monotonic() < deadline:  # no wait is made: exits stay unreaped
                seized = {r.tid for r in tracer.seized.sync(target.pid)} - {target.pid}
                exited = {tid for tid, (state, _t) in thread_states(target.pid).items() if state == "Z"} & seized
            assert exited, "a seized thread exited, unreaped"
        finally:
            tracer.detach_all()
        assert not exited & set(thread_states(target.pid)), "the detach reaped them"
        assert_running_free(target.pid)


def _symbol_span(path: str, name: str) -> tuple[int, int]:
    """[start, end) of a function symbol of ``path``, as linked (add the load bias)."""
    with open(path, "rb") as f:
        symbol = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name(name)[0]
        return symbol["st_value"], symbol["st_value"] + symbol["st_size"]


def _load_bias(pid: int, path: str) -> int:
    """Where ``path`` (a PIE, linked at 0) is mapped in ``pid``: its mapping of file offset 0."""
    real = os.path.realpath(path)
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == real and int(fields[2], 16) == 0:
                return int(fields[0].split("-")[0], 16)
    raise AssertionError(f"{path} is not mapped in {pid}")


def test_a_stop_before_a_passed_signal_s_handler_runs_is_sampled_where_the_signal_came(signals_fp):
    """A thread resumed with a signal builds its handler's frame in the kernel, and an interrupt that comes
    first stops it at the handler's first instruction, the handler not run: made certain here by sending the
    interrupt while the thread still sits in its signal-delivery-stop. The capture says a signal was passed,
    its registers are the handler's entry ones (checked against the real kernel's frame), and the frame
    holds the context the signal interrupted: the spinning loop, not the handler."""
    with running_target([signals_fp]) as target:
        tracer = Tracer()
        try:
            tracer.add_process(TargetProcess(target.pid))
            [record] = tracer.seized.sync(target.pid)
            # the SIGALRM of its 1 ms timer stops it in a signal-delivery-stop; look without taking the status
            info = os.waitid(os.P_PID, target.pid, os.WSTOPPED | os.WNOWAIT)
            assert info.si_code == os.CLD_TRAPPED and info.si_status == signal.SIGALRM, info
            assert raw_ptrace(PTRACE_INTERRUPT, target.pid, 0, 0) == 0
            tracer.answer_events()  # passes SIGALRM on, as between ticks
            [capture] = tracer.capture([record])
            regs = dwarf_registers(capture)
            bias = _load_bias(target.pid, signals_fp)
            handler, _end = _symbol_span(signals_fp, "on_alarm")
            assert capture.after_signal == signal.SIGALRM
            assert regs[DW_RA] == bias + handler and at_handler_entry(regs, signal.SIGALRM)
            window = StackWindow(capture.stack, capture.stack_base, capture.window_full)
            interrupted = interrupted_registers(regs, window, signal.SIGALRM)
            assert interrupted is not None
            in_spin, in_main = _symbol_span(signals_fp, "spin"), _symbol_span(signals_fp, "main")
            assert any(lo <= interrupted[DW_RA] - bias < hi for lo, hi in (in_spin, in_main)), hex(interrupted[DW_RA])
            assert interrupted[DW_RSP] > regs[DW_RSP]  # the frame was pushed below the interrupted stack
            # kept for the next stop: resumed and stopped again before the scheduler ran it, the thread is
            # still at the entry (under load, 7-39 samples in 2 s at 500 Hz were counted in the handler so)
            [later] = tracer.capture([record])
            assert later.after_signal == signal.SIGALRM
            later_regs = dwarf_registers(later)
            if at_handler_entry(later_regs, signal.SIGALRM):
                assert interrupted_registers(later_regs, StackWindow(later.stack, later.stack_base,
                                                                     later.window_full), signal.SIGALRM)
        finally:
            tracer.detach_all()
        assert_running_free(target.pid)


def _stack_top(pid: int, sp: int) -> int:
    """The end of the mapping holding ``sp`` (the main thread's [stack]: nothing is mapped right above it)."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= sp < hi:
                return hi
    raise AssertionError(f"no mapping holds {sp:#x}")


def test_a_thread_s_own_window_is_copied_and_never_more_than_the_slots_hold(chain_fp):
    """A thread's window, once widened by the sampler (``SeizedThread.widen``), is what its copies take, up
    to the end of its stack; a window past the tracer's largest is cut to it, as the slots hold no more.
    The target recurses 100 KiB deep half the time: each window is copied until a stop finds the stack
    deeper than it."""
    with running_target([chain_fp, "200"]) as target:
        tracer = Tracer(stack_bytes=4096, max_stack_bytes=16384)
        try:
            tracer.add_process(TargetProcess(target.pid))
            [record] = tracer.seized.sync(target.pid)
            for window, expect in ((0, 4096), (16384, 16384), (1 << 20, 16384)):
                record.stack_window = window
                for _ in range(1000):
                    [capture] = tracer.capture([record])
                    rsp = capture.slot.regs.rsp
                    room = _stack_top(target.pid, rsp) - rsp
                    assert capture.stack_base == rsp and capture.stack_len == min(expect, room), (window, room)
                    assert capture.window_full == (room > expect)
                    if room > 2 * expect:
                        break
                else:
                    raise AssertionError(f"no stop found the stack deeper than {2 * expect} bytes")
        finally:
            tracer.detach_all()
        assert_running_free(target.pid)


def test_a_zombie_is_not_taken_for_a_thread_another_tracer_has():
    """ptrace refuses a zombie (EPERM) as it refuses a thread another tracer has; a child process that
    exited is one until its parent reaps it. Only the traced thread is kept for the end-of-recording notice
    (``SeizedThreads.refused``); the zombie is gone, like a thread that exited."""
    table = SeizedThreads(TracerStats())
    child = subprocess.Popen(["true"])
    try:
        assert wait_until(lambda: (read_status(child.pid) or SimpleNamespace(state="?")).state == "Z")
        assert table._track(child.pid, child.pid, seized=False) is None
        assert table.refused == {}
    finally:
        child.wait()


#: on SIGUSR1, a daemon's double fork made certain to lose the race: the first child calls setsid, forks the
#: daemon and exits, and only once it is a zombie does the parent exit. The daemon (its pid in argv[2]) spins
#: until argv[3] exists
_ORPHANER = """
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
os.write(int(sys.argv[1]), b"ready\\n")
signal.sigwait({signal.SIGUSR1})
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
        end = time.monotonic() + 60
        while time.monotonic() < end and not os.path.exists(sys.argv[3]):
            pass
    os._exit(0)
os.waitid(os.P_PID, first, os.WEXITED | os.WNOWAIT)  # a zombie now, its child handed to a reaper
os._exit(0)
"""


def test_a_daemon_whose_first_child_is_gone_is_seized_through_its_session(tmp_path):
    """With ``follow_exits``, a parent's exit stop seizes its children before they are handed to a reaper
    (``Tracer.orphans``); a daemon's first child that exited already left its own child to the reaper, and
    it is found as the one process in the session that child led. Traced before the sampler ever makes it a
    process of its own, it must still be let go by the detach, or its signals would wait for a tracer that
    stopped answering."""
    pidfile, stopfile = str(tmp_path / "daemon"), str(tmp_path / "stop")
    daemon = 0
    try:
        with running_target([sys.executable, "-c", _ORPHANER, pidfile, stopfile], ready_at=3) as target:
            tracer = Tracer(follow_exits=True)
            try:
                tracer.add_process(TargetProcess(target.pid), trace_exec=True)
                tracer.seized.sync(target.pid)
                target.send_signal(signal.SIGUSR1)
                deadline = time.monotonic() + 10
                while tracer.seized.process_alive(target.pid) and time.monotonic() < deadline:
                    tracer.pump(time.monotonic() + 0.05)
                assert wait_until(lambda: os.path.exists(pidfile))
                with open(pidfile) as f:
                    daemon = int(f.read())
                assert list(tracer.orphans) == [daemon], (tracer.orphans, daemon)
                assert tracer.stats.orphans_seized == 1
                assert read_status(daemon).tracer_pid == threading.get_native_id()
                tracer.pump(time.monotonic() + 0.05)
                assert read_status(daemon).state in "RS", "an orphan runs while nothing samples it"
            finally:
                tracer.detach_all()
            assert not tracer.orphans
            assert_running_free(daemon)
    finally:
        open(stopfile, "w").close()
    assert wait_until(lambda: not os.path.exists(f"/proc/{daemon}")), "the daemon did not finish"
