"""The end-of-recording notices about walks cut short: when they are given, and what they advise."""

from __future__ import annotations

from profiler.model import FrameKind, Module, SampleClass, StopReason
from profiler.sampling.notices import (
    depth_limit_shortfall, no_unwind_info, other_stack_samples, stack_window_shortfall,
)  # fmt: skip
from profiler.sampling.session import Session, SessionMeta


def session_with(reason: StopReason, cut: int, total: int) -> Session:
    session = Session(SessionMeta(pid=1, command=["prog"]))
    thread = session.thread_index(1, 1, 1, "main")
    sid = session.intern_stack(((FrameKind.NATIVE, 0, 0x10, 0),))
    session.add_sample(thread, sid, reason, SampleClass.RUNNING, cut)
    session.add_sample(thread, sid, StopReason.END_OF_STACK, SampleClass.RUNNING, total - cut)
    return session


def test_window_and_depth_notices_suggest_four_times_the_limit():
    window = stack_window_shortfall(session_with(StopReason.WINDOW_EXHAUSTED, 50, 100), 4096)
    assert window is not None and window.startswith("50 samples (50.0%)") and "--stack-bytes 16384" in window
    depth = depth_limit_shortfall(session_with(StopReason.DEPTH_LIMIT, 50, 100), 2048)
    assert depth is not None and "deeper than 2,048 frames" in depth and "--max-frames 8192" in depth
    at_most = depth_limit_shortfall(session_with(StopReason.DEPTH_LIMIT, 50, 100), 65536)
    assert at_most is not None and "--max-frames" not in at_most, "no remedy beyond the maximum"


def test_notices_need_one_percent_and_ten_samples():
    assert stack_window_shortfall(session_with(StopReason.WINDOW_EXHAUSTED, 9, 20), 4096) is None
    assert stack_window_shortfall(session_with(StopReason.WINDOW_EXHAUSTED, 10, 2000), 4096) is None
    assert other_stack_samples(session_with(StopReason.OTHER_STACK, 10, 100)) is not None
    assert other_stack_samples(session_with(StopReason.WINDOW_EXHAUSTED, 10, 100)) is None


def test_walks_stopped_without_unwind_info_name_the_code_they_stopped_in():
    """Where the walk stopped is the outermost native frame of the stack: its module is named, file-backed
    ones by their file name, the busiest first."""
    session = session_with(StopReason.NO_UNWIND_INFO, 30, 100)
    modules = [Module(0, "[anon:7f00]", None, 0, 0x1000, 0, False), Module(1, "/opt/lib/libasm.so", None, 0, 0, 0)]
    thread = session.thread_index(1, 1, 1, "main")
    deeper = session.intern_stack(((FrameKind.NATIVE, 0, 0x10, 0), (FrameKind.NATIVE, 1, 0x20, 0)))
    session.add_sample(thread, deeper, StopReason.NO_UNWIND_INFO, SampleClass.RUNNING, 12)
    notice = no_unwind_info(session, modules)
    assert notice is not None and notice.startswith("42 samples (37.5%)")
    assert "in [anon:7f00] (30), libasm.so (12)" in notice
    assert no_unwind_info(session_with(StopReason.NO_UNWIND_INFO, 5, 100), modules) is None
