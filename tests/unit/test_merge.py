"""The merge of native and runtime frames (sampling/merge.py), a pure function."""

from __future__ import annotations

from profiler.model import NativeFrame, RuntimeFrame, UnwindMethod
from profiler.sampling.anchoring import BEYOND, NOWHERE, UNKNOWN
from profiler.sampling.merge import CUT, UNANCHORED, MergeOutcome, group_runtime, merge


def n(name: int) -> NativeFrame:
    return NativeFrame(0, name, name, UnwindMethod.CFI)


def py(code: int, entry: bool = True, shim: bool = False) -> RuntimeFrame:
    return RuntimeFrame(code, 0, entry, shim)


EVAL = 100  # the anchor's address in these fixtures


def anchors_of(native):
    return [f.rel == EVAL for f in native]


def names(frames):
    return [("py", f.code) if isinstance(f, RuntimeFrame) else ("cut",) if f is CUT else
            ("unanchored",) if f is UNANCHORED else ("c", f.rel) for f in frames]  # fmt: skip


def test_no_runtime_frames_is_the_native_stack():
    native = [n(1), n(2)]
    frames, outcome = merge(native, [False, False], [], True)
    assert frames == native and outcome is MergeOutcome.NO_RUNTIME


def test_a_chain_of_shims_alone_is_the_native_stack_3_12():
    """3.12+: a thread stopped while its eval loop's entry frame is the chain's only frame (a thread per
    request on 3.13, where the merge crashed nprof with an IndexError)."""
    native = [n(1), n(EVAL), n(2)]
    frames, outcome = merge(native, anchors_of(native), [py(0, False, shim=True)], True)
    assert frames == native and outcome is MergeOutcome.NO_RUNTIME


def test_one_frame_per_activation_up_to_3_10():
    # innermost first: C leaf, eval(inner), call glue, eval(outer), main
    native = [n(1), n(EVAL), n(2), n(EVAL), n(3)]
    runtime = [py(11), py(22)]  # inner, outer; every frame is an entry before 3.11
    frames, outcome = merge(native, anchors_of(native), runtime, True)
    assert outcome is MergeOutcome.EXACT
    assert names(frames) == [("c", 1), ("py", 11), ("c", EVAL), ("c", 2), ("py", 22), ("c", EVAL), ("c", 3)]


def test_groups_end_at_entry_frames_3_11():
    runtime = [py(1, False), py(2, True), py(3, False), py(4, True)]
    assert [[f.code for f in g] for g in group_runtime(runtime)] == [[1, 2], [3, 4]]


def test_shims_are_dropped_3_12():
    # 3.12 chain innermost first: h, SHIM, g, f, SHIM; the frame newer than a shim is the entry
    runtime = [py(1, True), py(0, False, shim=True), py(2, False), py(3, True), py(0, False, shim=True)]
    assert [[f.code for f in g] for g in group_runtime(runtime)] == [[1], [2, 3]]


def test_surplus_innermost_anchor_is_tolerated():
    native = [n(EVAL), n(2), n(EVAL), n(3)]  # an activation entered, no Python frame pushed yet
    frames, outcome = merge(native, anchors_of(native), [py(7)], True)
    assert outcome is MergeOutcome.SURPLUS_ANCHOR
    assert names(frames) == [("c", EVAL), ("c", 2), ("py", 7), ("c", EVAL), ("c", 3)]


def test_truncated_native_stack_gets_outer_groups_below():
    native = [n(1), n(EVAL)]  # the walk stopped early (window exhausted)
    runtime = [py(11), py(22), py(33)]
    frames, outcome = merge(native, anchors_of(native), runtime, native_complete=False)
    assert outcome is MergeOutcome.TRUNCATED_NATIVE
    # the marker stands for the native frames not unwound between the cut and the outer Python frames
    assert names(frames) == [("c", 1), ("py", 11), ("c", EVAL), ("cut",), ("py", 22), ("py", 33)]


def test_unanchored_keeps_every_frame_python_on_top_under_a_marker():
    native = [n(1), n(2), n(3)]  # no anchor found at all, though the walk was complete
    runtime = [py(11), py(22)]
    frames, outcome = merge(native, anchors_of(native), runtime, True)
    assert outcome is MergeOutcome.UNANCHORED
    assert names(frames) == [("py", 11), ("py", 22), ("unanchored",), ("c", 1), ("c", 2), ("c", 3)]


def test_a_group_standing_for_frames_not_read_takes_the_outer_anchors_left():
    # a subinterpreter's code (11 in its own activation) run from three frames of an older interpreter, one
    # activation each (3.8-3.10): 4 anchors, and 2 groups, the outer one standing for the three
    native = [n(1), n(EVAL), n(2), n(EVAL), n(EVAL), n(EVAL), n(3)]
    runtime = [py(11), RuntimeFrame(99, -1, True, rest=True)]
    frames, outcome = merge(native, anchors_of(native), runtime, True)
    assert outcome is MergeOutcome.REST
    assert names(frames) == [
        ("c", 1), ("py", 11), ("c", EVAL), ("c", 2), ("py", 99), ("c", EVAL), ("c", EVAL), ("c", EVAL), ("c", 3)
    ]  # fmt: skip
    # one activation for the older interpreter (3.11+) is the count the groups make: paired as they are
    native = [n(1), n(EVAL), n(2), n(EVAL), n(3)]
    frames, outcome = merge(native, anchors_of(native), runtime, True)
    assert outcome is MergeOutcome.EXACT
    assert names(frames) == [("c", 1), ("py", 11), ("c", EVAL), ("c", 2), ("py", 99), ("c", EVAL), ("c", 3)]


BASE = 50  # a coroutine's stack base (greenlet's g_initialstub) in these fixtures


def test_a_greenlet_s_frames_run_on_the_eval_loops_inward_of_its_stack_base():
    """A running greenlet's chain holds its own frames only; the eval loops outward of its stack base run
    the greenlet that switched to it. Paired from the outside, its frames sat on the outer loop."""
    # innermost first: eval(greenlet's producer), bootstrap, g_initialstub, switch glue, eval(main's loop), main
    native = [n(EVAL), n(2), n(BASE), n(3), n(EVAL), n(4)]
    frames, outcome = merge(native, anchors_of(native), [py(7)], True, lambda i: native[i].rel == BASE)
    assert outcome is MergeOutcome.OTHER_STACK
    assert names(frames) == [("py", 7), ("c", EVAL), ("c", 2), ("c", BASE), ("c", 3), ("c", EVAL), ("c", 4)]


def test_up_to_3_10_every_frame_of_a_greenlet_takes_its_own_eval_loop():
    """One eval loop per frame: two greenlet frames, two loops inward of the base, two outward (3.8 put
    every Python frame on top of the native stack: a mismatch)."""
    native = [n(EVAL), n(1), n(EVAL), n(2), n(BASE), n(3), n(EVAL), n(EVAL), n(4)]
    frames, outcome = merge(native, anchors_of(native), [py(7), py(8)], True, lambda i: native[i].rel == BASE)
    assert outcome is MergeOutcome.OTHER_STACK
    assert names(frames)[:5] == [("py", 7), ("c", EVAL), ("c", 1), ("py", 8), ("c", EVAL)]


def test_without_a_stack_base_the_surplus_anchor_is_still_the_innermost():
    native = [n(EVAL), n(2), n(EVAL), n(3)]
    frames, outcome = merge(native, anchors_of(native), [py(7)], True, lambda i: False)
    assert outcome is MergeOutcome.SURPLUS_ANCHOR


# --- by the address of each activation's record (anchoring.place's positions) ----------------------------


def test_groups_placed_by_address_need_no_names():
    """A stripped interpreter names its eval loop's body nothing (gcc's ``.cold`` part, named only in a
    debug file): the positions alone pair the groups, whatever the frames are called."""
    native = [n(1), n(7), n(2), n(8), n(3)]  # 7 and 8: the activations, named by nothing
    runtime = [py(11), py(22, entry=False), py(33)]
    frames, outcome = merge(native, anchors_of(native), runtime, True, placed=(1, 3))
    assert outcome is MergeOutcome.PLACED
    assert names(frames) == [("c", 1), ("py", 11), ("c", 7), ("c", 2), ("py", 22), ("py", 33), ("c", 8), ("c", 3)]


def test_an_activation_entered_without_a_group_keeps_its_frame_without_python():
    # the innermost eval loop has not pushed its first frame: by name, a surplus anchor; by address, a frame
    native = [n(EVAL), n(2), n(EVAL), n(3)]
    frames, outcome = merge(native, anchors_of(native), [py(7)], True, placed=(2,))
    assert outcome is MergeOutcome.PLACED
    assert names(frames) == [("c", EVAL), ("c", 2), ("py", 7), ("c", EVAL), ("c", 3)]


def test_groups_without_a_record_take_the_named_anchors_between_their_neighbours():
    # a 3.11 _PyCFrame outside the copied stack: the middle group is placed by the one anchor between
    native = [n(EVAL), n(2), n(EVAL), n(3), n(EVAL), n(4)]
    frames, outcome = merge(native, anchors_of(native), [py(1), py(2), py(3)], True, placed=(0, UNKNOWN, 4))
    assert outcome is MergeOutcome.PLACED
    assert names(frames) == [("py", 1), ("c", EVAL), ("c", 2), ("py", 2), ("c", EVAL), ("c", 3), ("py", 3),
                             ("c", EVAL), ("c", 4)]  # fmt: skip


def test_groups_beyond_a_walk_that_ended_early_go_below_it():
    native = [n(1), n(9), n(2)]  # the walk ended at 2 (window exhausted)
    frames, outcome = merge(native, anchors_of(native), [py(1), py(2)], False, placed=(1, BEYOND))
    assert outcome is MergeOutcome.PLACED_TRUNCATED
    assert names(frames) == [("c", 1), ("py", 1), ("c", 9), ("c", 2), ("cut",), ("py", 2)]


def test_records_out_of_order_or_in_no_frame_leave_the_sample_to_the_names():
    native = [n(EVAL), n(2), n(EVAL), n(3)]
    runtime = [py(1), py(2)]
    for placed in ((2, 0), (0, 0), (0, NOWHERE)):
        frames, outcome = merge(native, anchors_of(native), runtime, True, placed=placed)
        assert outcome is MergeOutcome.EXACT, placed  # by name: two anchors, two groups
        assert names(frames) == [("py", 1), ("c", EVAL), ("c", 2), ("py", 2), ("c", EVAL), ("c", 3)]
    # neither the records nor the names place them: marked, not presented as real
    frames, outcome = merge([n(1), n(2)], [False, False], runtime, True, placed=(0, NOWHERE))
    assert outcome is MergeOutcome.UNANCHORED
    assert names(frames)[2] == ("unanchored",)


def test_a_tail_calling_eval_loop_runs_its_group_in_the_frame_holding_the_entry():
    """3.14's tail-calling interpreter (clang, ``--with-tail-call-interp``) runs each opcode in a
    ``_TAIL_CALL_<op>`` handler that ``_PyEval_EvalFrameDefault`` calls (its entry frame, on its own C
    stack, must outlive the call: Python/ceval.c), each handler tail-calling the next: one handler frame
    is live, inward of the eval loop's. The group goes between them, by address and by name alike."""
    tail_call, eval_loop = n(7), n(EVAL)  # (7: _TAIL_CALL_CALL.llvm.123, call glue, no anchor)
    native = [n(1), tail_call, eval_loop, n(3)]
    by_address, outcome = merge(native, anchors_of(native), [py(11)], True, placed=(2,))
    assert outcome is MergeOutcome.PLACED
    by_name, outcome = merge(native, anchors_of(native), [py(11)], True)
    assert outcome is MergeOutcome.EXACT
    assert names(by_address) == names(by_name) == [("c", 1), ("c", 7), ("py", 11), ("c", EVAL), ("c", 3)]
