"""Which native frame holds each activation's record (sampling/anchoring.py), a pure function."""

from __future__ import annotations

from types import SimpleNamespace

from profiler.model import NativeFrame, UnwindMethod
from profiler.sampling.anchoring import BEYOND, NOWHERE, UNKNOWN, place
from profiler.sampling.sampled_process import SampledProcess, SampledThread
from profiler.sampling.stacks import RUNTIME_LOOKS, StackRecorder

#: four frames, innermost first: frame i owns [SPS[i], SPS[i + 1]); the last, everything above its own
SPS = [0x1000, 0x1080, 0x1200, 0x1400]


def test_a_record_belongs_to_the_frame_whose_stack_bytes_hold_it():
    marks = [0x1000, 0x107F, 0x1080, 0x11F8, 0x1300]
    assert place(SPS, 4, marks, True) == (0, 0, 1, 1, 2)


def test_no_record_is_unknown():
    assert place(SPS, 4, [0, 0x1100, 0], True) == (UNKNOWN, 1, UNKNOWN)


def test_above_the_last_frame_it_is_that_frame_only_if_the_walk_reached_the_outermost():
    assert place(SPS, 4, [0x1500], True) == (3,)
    assert place(SPS, 4, [0x1500], False) == (BEYOND,)
    # the walk noted where the next frame starts before it ended: the last frame ends there
    assert place([*SPS, 0x1600], 4, [0x1500, 0x1700], False) == (3, BEYOND)


def test_below_the_innermost_stack_pointer_a_record_is_nowhere():
    # nothing of a live activation lies below the stack pointer of the thread
    assert place(SPS, 4, [0x0F00], True) == (NOWHERE,)


def test_a_signal_frame_onto_another_stack_is_searched_frame_by_frame():
    # a handler on an alternate stack at 0x9000 interrupted code on the thread's stack at 0x1000
    sps = [0x9000, 0x9100, 0x1000, 0x1100]
    assert place(sps, 4, [0x9050, 0x1050], True) == (0, 2)
    assert place(sps, 4, [0x0800], True) == (NOWHERE,)


def test_a_walk_without_frames_places_nothing_by_address():
    assert place([], 0, [0x1000], False) == (BEYOND,)


def test_native_frames_asked_about_before_the_runtime_was_found_are_asked_again():
    """``SampledProcess.flags`` remembers, per frame, what the agent said of it; asked before there was an agent
    (a spawned interpreter runs Python before nprof finds it), it said "not an anchor" of the eval loop,
    and kept saying it for the rest of the recording: 270 of 304 samples of a json loop misplaced."""
    eval_loop = NativeFrame(3, 0x5000, 0x7F00_0000_5000, UnwindMethod.CFI)
    session = SimpleNamespace(is_anchor=lambda frame: frame.rel == 0x5000, is_gil_wait=lambda frame: False)
    agent = SimpleNamespace(name="cpython", detect=lambda process: session)
    target = SampledProcess(SimpleNamespace(pid=1), SimpleNamespace(generation=0),  # type: ignore[arg-type]
                    SimpleNamespace(max_frames=64))  # fmt: skip
    assert target.flags(eval_loop) == (False, False), "no agent yet"
    assert target.detect([agent], lambda found, pid: 0)  # type: ignore[list-item]
    assert target.flags(eval_loop) == (True, False)


def test_a_sample_in_the_eval_loop_without_its_frames_has_the_thread_stopped_again():
    """A thread whose thread state was not found in its stop is not counted with that stack while it
    sleeps: its next idle check stops it again (``SampledThread.look_again``), up to ``RUNTIME_LOOKS`` times
    in a row; a sample with the runtime's frames ends the run."""
    state = SampledThread(0)
    for looks in range(RUNTIME_LOOKS):
        state.last_run_time = 5
        StackRecorder._look_again_for_runtime(state, True)
        assert state.last_run_time == -1 and state.runtime_missed == looks + 1
    state.last_run_time = 5
    StackRecorder._look_again_for_runtime(state, True)
    assert state.last_run_time == 5, "given up: a thread in an eval loop with no state nprof can find"
    StackRecorder._look_again_for_runtime(state, False)
    assert state.runtime_missed == 0
