"""The sampling thread's switches between SCHED_FIFO and its own policy (``profiler/sampling/priority.py``).

The kernel calls are replaced by a recorder: what is checked is which calls the policy makes, and what it
says when real-time priority is refused. The integration test ``test_record_duty.py`` checks the effect."""

from __future__ import annotations

import os
import resource

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
        monkeypatch.setattr(pr.os, "sched_getscheduler", lambda pid: self.policy)
        monkeypatch.setattr(pr.os, "sched_getparam", lambda pid: os.sched_param(0))
        monkeypatch.setattr(pr.os, "sched_setscheduler", self.set)
        monkeypatch.setattr(pr.resource, "getrlimit", lambda which: (self.rtprio_limit, self.rtprio_limit))

    def set(self, pid: int, policy: int, param: os.sched_param) -> None:
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
    """On this machine, without a recorder: whatever is permitted, normal() restores the policy it found."""
    before = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    policy = pr.SamplingPolicy(SamplingPriority.AUTO)
    policy.start()
    policy.normal()
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before


def test_unlimited_rtprio_adds_no_second_try(monkeypatch):
    monkeypatch.setattr(pr.resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert pr._candidate_priorities() == [pr.FIFO_PRIORITY]
    monkeypatch.setattr(pr.resource, "getrlimit", lambda which: (0, 0))
    assert pr._candidate_priorities() == [pr.FIFO_PRIORITY]
