"""Where each eval-loop activation keeps its record on the C stack (agents/cpython/marks.py), and the
placement of a capture's Python frames among native frames by those records (sampling/anchoring.py,
merge.py, stacks.py), over captures of the fake target of ``tests/support/fake_cpython.py``.

The fake memory's top is a C stack (``FakeTarget.push``); the native frames are made up around the
records put there: frame ``i`` owns ``[sps[i], sps[i + 1])``, as ``UnwoundStack.sps`` says."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.cpython.offsets import TABLES
from agents.cpython.session import CPythonSession
from profiler.model import (
    FrameKind,
    NativeFrame,
    RuntimeFrame,
    StopReason,
    SyntheticFrame,
    UnwindMethod,
)
from profiler.runtime import Capabilities
from profiler.sampling.anchoring import place
from profiler.sampling.merge import MergeOutcome, merge
from profiler.sampling.stacks import StackRecorder
from profiler.unwind.stack import StackWindow
from tests.support.fake_cpython import HEAP, HEAP_SIZE, OWNER_CSTACK, REGS, TID, FakeTarget, session_over

V311 = pytest.param(TABLES[(3, 11)], id="3.11")
V312 = pytest.param(TABLES[(3, 12)], id="3.12")
EVAL = 0x5000  #: the eval loop's address in the made-up native frames (when it is named)


def frame_at(target: FakeTarget, addr: int, code: int, previous: int, owner: int = 0, is_entry: int = 0) -> None:
    """A ``_PyInterpreterFrame`` at ``addr`` (on the fake C stack, where an eval loop keeps its entry)."""
    f = target.layout.frame
    target.link(addr, previous)
    target.put(addr + f.code, "Q", code)
    target.put(addr + f.instr, "Q", code + (target.layout.code.code_adaptive or 0) + 2 if code else 0)
    if f.owner is not None:
        target.put(addr + f.owner, "B", owner)
    if f.is_entry is not None:
        target.put(addr + f.is_entry, "B", is_entry)


def c_stack(target: FakeTarget) -> StackWindow:
    """The copy of the fake C stack a sample would hold, from its lowest address in use to its top."""
    base = target.sp - 0x200
    return StackWindow(target.read(base, HEAP + HEAP_SIZE - base), base, False)


def two_activations(target: FakeTarget) -> tuple[int, int, object]:
    """An outer eval loop runs ``main`` -> ``caller``, which calls C, which calls back ``callback`` in an
    inner one. Returns the two records' addresses (inner, outer) and the session's capture."""
    t = target.layout.thread
    main, caller, callback = (target.code(name, 10 * (i + 1)) for i, name in enumerate(["main", "caller", "cb"]))
    if target.layout.frame.shim_owners:  # 3.12: entry frames on the C stack
        outer = target.push(128)
        inner = target.push(128)
        f_main = target.frame(main, outer)
        frame_at(target, outer, 0, 0, owner=OWNER_CSTACK)
        f_caller = target.frame(caller, f_main)
        frame_at(target, inner, 0, f_caller, owner=OWNER_CSTACK)
        f_cb = target.frame(callback, inner)
        info = target.thread_state(f_cb)
        return inner, outer, session_capture(target, info)
    # 3.11: a _PyCFrame per eval loop, the outer made by thread_state
    f_main = target.frame(main, 0, is_entry=1)
    f_caller = target.frame(caller, f_main)
    f_cb = target.frame(callback, f_caller, is_entry=1)
    info = target.thread_state(f_caller)
    outer = int.from_bytes(target.read(info.addr + t.frame, 8), "little")
    target.push(96)  # the rest of the outer eval loop's frame, and the C function's between
    inner = target.push(32)
    target.put(inner + t.cframe_current_frame, "Q", f_cb)
    target.put(inner + t.cframe_previous, "Q", outer)
    target.put(info.addr + t.frame, "Q", inner)
    return inner, outer, session_capture(target, info)


def session_capture(target: FakeTarget, info) -> tuple[CPythonSession, object]:
    session = session_over(target, info)
    return session, session.capture(TID, REGS)


def native_around(inner: int, outer: int, named: bool) -> tuple[list[NativeFrame], list[int]]:
    """Native frames, innermost first: a C leaf, the inner eval loop (holding ``inner``), the C function
    that called back, the outer eval loop (holding ``outer``), main; and their stack pointers."""
    ev = EVAL if named else 0x7777
    rels = [0x100, ev, 0x200, ev + 1, 0x300]
    sps = [inner - 0x40, inner - 0x10, inner + 0x60, outer - 0x10, outer + 0x80]
    return [NativeFrame(0, rel, rel, UnwindMethod.CFI) for rel in rels], sps


def labels(session: CPythonSession, frames) -> list[str]:
    out = []
    for f in frames:
        if isinstance(f, RuntimeFrame):
            out.append(session.codes.get(f.code).name.removeprefix("Q."))
        elif isinstance(f, NativeFrame):
            out.append("EVAL" if f.rel in (EVAL, EVAL + 1, 0x7777, 0x7778) else hex(f.rel))
        else:
            out.append(f.kind.name)
    return out


@pytest.mark.parametrize("target", [V311, V312], indirect=True)
def test_each_group_gets_its_activations_record(target):
    inner, outer, (session, capture) = two_activations(target)
    frames = session.frames(capture)
    assert [not f.shim for f in frames].count(True) == 3
    assert session.activations(capture, c_stack(target)) == [inner, outer]


@pytest.mark.parametrize("target", [V311, V312], indirect=True)
def test_records_place_the_groups_where_names_cannot(target):
    """A stripped interpreter's eval loop is named by nothing (its body in ``.cold``): the records alone
    put each group inward of its own eval loop."""
    inner, outer, (session, capture) = two_activations(target)
    runtime = session.frames(capture)
    native, sps = native_around(inner, outer, named=False)
    placed = place(sps, len(native), session.activations(capture, c_stack(target)), True)
    assert placed == (1, 3)
    merged, outcome = merge(native, [False] * len(native), runtime, True, placed=placed)
    assert outcome is MergeOutcome.PLACED
    assert [x for x in labels(session, merged) if x != "SHIM"] == [
        "0x100", "cb", "EVAL", "0x200", "caller", "main", "EVAL", "0x300"]  # fmt: skip


@pytest.mark.parametrize("target", [V312], indirect=True)
def test_a_corrupted_record_gives_an_unanchored_stack_and_its_counter(target):
    """A shim whose address lies in no native frame (here: in the heap) cannot place its group; with no
    name to fall back on, the sample is kept, its Python frames above the native stack under an
    ``[unanchored]`` frame, and counted as ``merge_unanchored``."""
    inner, outer, (session, capture) = two_activations(target)
    runtime = session.frames(capture)
    marks = session.activations(capture, c_stack(target))
    marks[1] = HEAP + 0x40  # the outer record, corrupted
    native, sps = native_around(inner, outer, named=False)
    placed = place(sps, len(native), marks, True)
    recorder = StackRecorder(SimpleNamespace(intern_stack=lambda keys: keys), SimpleNamespace(native=True,
                             stack_bytes=1 << 16, window_cap=1 << 16))  # fmt: skip
    stub = SimpleNamespace(agent=object(), agent_index=0, caps=Capabilities(), flags=lambda f: (f.rel == EVAL, False),
                           is_coroutine_base=lambda f: False)  # fmt: skip
    keys, in_gil_wait, counted, _runs = recorder._stack_id(stub, native, runtime, StopReason.END_OF_STACK, placed)
    assert counted == ("merge_unanchored",) and not in_gil_wait
    kinds = [k[0] for k in keys]
    marker = keys.index((FrameKind.SYNTHETIC, 0, SyntheticFrame.UNANCHORED, 0))
    # innermost first: every Python frame, the marker, then every native frame
    assert set(kinds[:marker]) == {FrameKind.RUNTIME} and set(kinds[marker + 1 :]) == {FrameKind.NATIVE}
    assert len(kinds) - marker - 1 == len(native)
    # the same corruption with the eval loops named: the names place it, and say that the records failed
    stub.flags = lambda f: (f.rel in (0x7777, 0x7778), False)
    _keys, _, counted, _runs = recorder._stack_id(stub, native, runtime, StopReason.END_OF_STACK, placed)
    assert counted == ("python_placed_by_name",)


@pytest.mark.parametrize("target", [V311], indirect=True)
def test_a_cframe_outside_the_copied_stack_ends_the_records(target):
    """3.11's records are read from the copy of the C stack: past its end, the outer groups have none
    (and the names place them)."""
    inner, outer, (session, capture) = two_activations(target)
    session.frames(capture)
    window = c_stack(target)
    cut = StackWindow(target.read(window.base, outer - window.base), window.base, True)
    assert session.activations(capture, cut) == [inner, 0]


@pytest.mark.parametrize("target", [V311], indirect=True)
def test_a_new_cframe_not_filled_in_yet_does_not_take_the_enclosing_group(target):
    """``tstate->cframe`` is set before its ``current_frame``: a leftover naming the enclosing loop's
    frame must not give that group the new loop's record (walking outward, the enclosing one's wins)."""
    inner, outer, (session, capture) = two_activations(target)
    t = target.layout.thread
    entering = target.push(32)
    target.put(entering + t.cframe_current_frame, "Q", capture.frames[0][0])  # names the innermost frame
    target.put(entering + t.cframe_previous, "Q", inner)
    capture.cframe = entering
    session.frames(capture)
    assert session.activations(capture, c_stack(target)) == [inner, outer]
