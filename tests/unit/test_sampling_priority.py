"""The sampling thread's switches between SCHED_FIFO and its own policy (``profiler/sampling/priority.py``).

The kernel calls are replaced by a recorder: what is checked is which calls the policy makes, and what it
says when real-time priority is refused. The last tests use the real kernel where it permits real-time
priority: the SIGXCPU backstop and threads started at real-time priority. The integration test
``test_record_duty.py`` checks the effect on a recording."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

from profiler.config import SamplingPriority
from profiler.errors import PermissionDenied
from profiler.sampling import priority as pr


class Kernel:
    """Stands in for sched_getscheduler/sched_setscheduler/getrlimit; refuses FIFO above ``rtprio_limit``
    unless ``privileged``."""

    def __init__(self, monkeypatch, policy: int = os.SCHED_OTHER, privileged: bool = True, rtprio_limit: int = 0):
        self.policy, self.privileged, self.rtprio_limit = policy, privileged, rtprio_limit
        self.calls: list[tuple[int, int]] = []
        #: RLIMIT_RTTIME and RLIMIT_CPU: a hard RTTIME limit leaves the SIGXCPU backstop unarmed (the default
        #: here; ``Backstop`` lifts it)
        self.limits = {resource.RLIMIT_RTTIME: (0, 0), resource.RLIMIT_CPU: (resource.RLIM_INFINITY,) * 2}
        self.set_limits: list[tuple[int, int]] = []
        monkeypatch.setattr(pr.os, "sched_getscheduler", lambda pid: self.policy)
        monkeypatch.setattr(pr.os, "sched_getparam", lambda pid: os.sched_param(0))
        monkeypatch.setattr(pr.os, "sched_setscheduler", self.set)
        monkeypatch.setattr(pr.resource, "getrlimit", self.getrlimit)
        monkeypatch.setattr(pr.resource, "setrlimit", lambda which, limit: self.set_limits.append(limit))

    def getrlimit(self, which: int) -> tuple[int, int]:
        return self.limits.get(which, (self.rtprio_limit, self.rtprio_limit))

    def set(self, pid: int, policy: int, param: os.sched_param) -> None:
        policy &= ~os.SCHED_RESET_ON_FORK  # asked for with every raise: checked in its own test
        if policy == os.SCHED_FIFO and not self.privileged and param.sched_priority > self.rtprio_limit:
            raise PermissionError(1, "Operation not permitted")
        self.calls.append((policy, param.sched_priority))
        self.policy = policy


def test_auto_sleeps_at_fifo_and_works_at_its_own_policy(monkeypatch):
    kernel = Kernel(monkeypatch)
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    assert policy.start() is None
    assert kernel.policy == os.SCHED_FIFO  # start leaves it raised, ready for the first sleep
    policy.realtime()  # already there: no call
    policy.normal()
    policy.normal()  # already there: no call
    policy.realtime()
    policy.normal()
    fifo, other = (os.SCHED_FIFO, pr.FIFO_PRIORITY), (os.SCHED_OTHER, 0)
    assert kernel.calls == [fifo, other, fifo, other]


def test_auto_without_permission_says_why_and_changes_nothing(monkeypatch):
    kernel = Kernel(monkeypatch, privileged=False)
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    message = policy.start()
    assert message is not None and "CAP_SYS_NICE" in message and "--cap-add SYS_NICE" in message
    policy.realtime()
    policy.normal()
    assert kernel.calls == [] and kernel.policy == os.SCHED_OTHER


def test_fifo_without_permission_is_an_error(monkeypatch):
    Kernel(monkeypatch, privileged=False)
    with pytest.raises(PermissionDenied) as e:
        pr.SamplingPolicy(SamplingPriority.FIFO).start()
    assert "ulimit -r" in str(e.value) and "--priority auto" in str(e.value)


def test_require_fails_early_for_fifo_only(monkeypatch):
    kernel = Kernel(monkeypatch, privileged=False)
    pr.require(SamplingPriority.AUTO)  # auto records anyway, with its notice at the start
    with pytest.raises(PermissionDenied):
        pr.require(SamplingPriority.FIFO)
    kernel.privileged = True
    pr.require(SamplingPriority.FIFO)
    assert kernel.calls == [(os.SCHED_FIFO, pr.FIFO_PRIORITY), (os.SCHED_OTHER, 0)]  # back at its own policy


def test_rtprio_limit_lets_an_unprivileged_user_in_lower(monkeypatch):
    kernel = Kernel(monkeypatch, privileged=False, rtprio_limit=5)
    assert pr.SamplingPolicy(SamplingPriority.AUTO).start() is None
    assert kernel.calls == [(os.SCHED_FIFO, 5)]


def test_normal_and_realtime_starts_are_left_alone(monkeypatch):
    kernel = Kernel(monkeypatch)
    policy = pr.SamplingPolicy(SamplingPriority.NORMAL)
    assert policy.start() is None
    policy.realtime()
    kernel_rr = Kernel(monkeypatch, policy=os.SCHED_RR)  # started under chrt -r
    already = pr.SamplingPolicy(SamplingPriority.AUTO)
    assert already.start() is None
    already.realtime()
    already.normal()
    assert kernel.calls == [] and kernel_rr.calls == [] and kernel_rr.policy == os.SCHED_RR


def test_the_real_thread_goes_back_to_its_policy():
    """On this machine, without a recorder: whatever is permitted, stop() restores the policy it found, and
    the SIGXCPU handler and RTTIME limit."""
    def now() -> tuple:
        return (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority,
                resource.getrlimit(resource.RLIMIT_RTTIME), signal.getsignal(signal.SIGXCPU))  # fmt: skip

    before = now()
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    policy.start()
    policy.after_stops()
    policy.stop()
    assert now() == before


def test_unlimited_rtprio_adds_no_second_try(monkeypatch):
    monkeypatch.setattr(pr.resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert pr._candidate_priorities() == [pr.FIFO_PRIORITY]
    monkeypatch.setattr(pr.resource, "getrlimit", lambda which: (0, 0))
    assert pr._candidate_priorities() == [pr.FIFO_PRIORITY]


FIFO, OTHER = (os.SCHED_FIFO, pr.FIFO_PRIORITY), (os.SCHED_OTHER, 0)


def test_without_the_backstop_the_work_after_the_stops_is_at_the_own_policy(monkeypatch):
    kernel = Kernel(monkeypatch)  # a hard RTTIME limit: no backstop
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    policy.start()
    policy.after_stops()
    assert kernel.calls == [FIFO, OTHER]


def test_the_work_after_the_stops_stays_real_time_for_its_budget(monkeypatch):
    kernel = Kernel(monkeypatch)
    kernel.limits[resource.RLIMIT_RTTIME] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    now = [100.0]
    monkeypatch.setattr(pr.time, "monotonic", lambda: now[0])
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    policy.start()
    try:
        assert signal.getsignal(signal.SIGXCPU) == pr.on_sigxcpu
        budget_us = round(pr.WORK_BUDGET * 1e6)
        assert kernel.set_limits == [(budget_us, resource.RLIM_INFINITY)]
        policy.after_stops()
        now[0] += pr.WORK_BUDGET / 2
        policy.check()
        assert kernel.calls == [FIFO]  # within the budget: no switch
        now[0] += pr.WORK_BUDGET
        policy.check()
        policy.check()
        assert kernel.calls == [FIFO, OTHER] and policy.budget_drops == 1
        policy.realtime()
        pr.on_sigxcpu(signal.SIGXCPU, None)  # during a tick's stops: they finish at real-time priority
        assert kernel.calls == [FIFO, OTHER, FIFO] and policy.backstop_drops == 0
        policy.after_stops()
        pr.on_sigxcpu(signal.SIGXCPU, None)  # a step of the work after them ran past the budget
        assert kernel.calls == [FIFO, OTHER, FIFO, OTHER] and policy.backstop_drops == 1
        assert kernel.set_limits[-1] == (budget_us, resource.RLIM_INFINITY)  # set back after each signal
    finally:
        policy.stop()
    assert signal.getsignal(signal.SIGXCPU) == signal.SIG_DFL
    assert kernel.set_limits[-1] == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)  # as it found it


def test_a_cpu_time_limit_keeps_its_sigxcpu(monkeypatch):
    """SIGXCPU also says that RLIMIT_CPU is reached; a handler that only dropped priority would hide that."""
    kernel = Kernel(monkeypatch)
    kernel.limits[resource.RLIMIT_RTTIME] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    kernel.limits[resource.RLIMIT_CPU] = (60, resource.RLIM_INFINITY)
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    policy.start()
    policy.after_stops()
    policy.stop()
    assert kernel.calls == [FIFO, OTHER] and kernel.set_limits == []
    assert signal.getsignal(signal.SIGXCPU) == signal.SIG_DFL


def _real_time_or_skip(policy: pr.SamplingPolicy) -> None:
    if policy.start() is not None or os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK != os.SCHED_FIFO:
        policy.stop()
        pytest.skip("real-time priority is not permitted here (or this thread already has it)")


def test_the_kernel_cuts_long_work_at_real_time_priority():
    """On this machine: work after the stops that never blocks is sent SIGXCPU and dropped back, within a few
    scheduler ticks (4.5-7 ms measured here at HZ=250; the bound allows HZ=100 and a loaded machine)."""
    before = os.sched_getscheduler(0), resource.getrlimit(resource.RLIMIT_RTTIME), signal.getsignal(signal.SIGXCPU)
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    _real_time_or_skip(policy)
    if policy._backstop is None:
        policy.stop()
        pytest.skip("the SIGXCPU backstop is not armed here (a hard RLIMIT_RTTIME, or a CPU time limit)")
    try:
        time.sleep(0.001)  # the kernel counts real-time run time from the last wake-up
        policy.after_stops()
        start = time.monotonic()
        while os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO:
            assert time.monotonic() - start < 1.0, "no SIGXCPU after 1 s of work at real-time priority"
        assert policy.backstop_drops == 1
    finally:
        policy.stop()
    after = os.sched_getscheduler(0), resource.getrlimit(resource.RLIMIT_RTTIME), signal.getsignal(signal.SIGXCPU)
    assert after == before


def test_threads_started_at_real_time_priority_do_not_inherit_it():
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    _real_time_or_skip(policy)
    seen: list[int] = []
    try:
        thread = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        thread.start()
        thread.join()
    finally:
        policy.stop()
    assert seen == [os.SCHED_OTHER]


#: the backstop of a sampling thread that is not the main one (``target/tracing_thread.py``), in a process of
#: its own: the CLI's import of numpy is what makes numpy's threads block SIGXCPU, so that the main thread is
#: the one the kernel hands it to. Prints how the busy loop at real-time priority ended.
_BACKSTOP_ON_THE_TRACING_THREAD = """
import os, signal, threading, time
import profiler.cli
from profiler.config import SamplingPriority
from profiler.sampling import priority as pr
from profiler.target.tracing_thread import TracingThread

def policy_of(tid=0):
    return os.sched_getscheduler(tid) & ~os.SCHED_RESET_ON_FORK

def work():
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    if policy.start() is not None or policy_of() != os.SCHED_FIFO or policy._backstop is None:
        policy.stop()
        return "skip"
    try:
        main = policy_of(threading.main_thread().native_id)
        time.sleep(0.001)  # the kernel counts real-time run time from the last wake-up
        policy.after_stops()
        start = time.monotonic()
        while policy_of() == os.SCHED_FIFO:
            if time.monotonic() - start > 1.0:
                return "not cut"
        return f"cut {policy.backstop_drops} {time.monotonic() - start:.3f} {main}"
    finally:
        policy.stop()

with TracingThread(handlers={signal.SIGXCPU: pr.on_sigxcpu}) as tracing:
    print(tracing.call(work), policy_of(), signal.getsignal(signal.SIGXCPU) is pr.on_sigxcpu)
print(signal.getsignal(signal.SIGXCPU) == signal.SIG_DFL)
"""


def test_the_kernel_cuts_long_work_on_a_tracing_thread():
    """Python runs signal handlers on the main thread only: there the handler drops the tracing thread by its
    id, once the main thread, at real-time priority while it waits, has the GIL (the switch interval, 5 ms)."""
    result = subprocess.run([sys.executable, "-c", _BACKSTOP_ON_THE_TRACING_THREAD], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, after = result.stdout.splitlines()
    if first.startswith("skip"):
        pytest.skip("real-time priority or the SIGXCPU backstop is not available here")
    what, drops, took, main_policy, main_after, installed = first.split()
    assert (what, drops) == ("cut", "1"), first
    assert float(took) < 0.5, f"cut after {took} s"
    assert int(main_policy) == os.SCHED_FIFO, "the main thread waits at real-time priority"
    assert int(main_after) == os.SCHED_OTHER, "and is back at its own once sampling stopped"
    assert installed == after == "True", "the handler is the main thread's, for the tracing thread's life"
