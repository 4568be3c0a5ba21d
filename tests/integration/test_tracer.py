"""The tracer's guarantees, checked from outside through /proc: what is stopped is resumed, always."""

from __future__ import annotations

import time

import pytest

from profiler.target.process import TargetProcess
from profiler.target.tracer import Tracer
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
