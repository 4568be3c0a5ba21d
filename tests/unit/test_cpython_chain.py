"""The stop-time copy and the decode of CPython frame chains, over a synthetic target memory.

Over ``tests/support/fake_cpython.py``'s ``FakeTarget``, whose memory the agent reads through its injected
reader. Corrupt chains must give truncated stacks, never an exception or a hang.
"""

from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

import pytest

from agents.cpython import code_prefetch, plan, scatter
from agents.cpython.capture import MAX_FRAMES, CaptureStatus, StackCapture
from agents.cpython.code import SHIM_KEY, UNKNOWN_KEY, CodeCache
from agents.cpython.frames import decode_frames
from agents.cpython.locals import LocalsReader
from agents.cpython.offsets import TABLES
from agents.cpython.plan import SHRINK_AFTER, build_plan
from agents.cpython.scatter import PAGE_SIZE, ScatterReader
from agents.cpython.session import CPythonSession
from agents.cpython.slot import ThreadSlot
from agents.cpython.threads import (
    NEW_STATES_SEARCHED,
    NEW_THREAD_SEARCHES,
    ThreadMap,
    ThreadStateInfo,
    WalkSchedule,
    find_new_thread_state,
    walk_thread_states,
)
from profiler.runtime import RECAPTURE
from profiler.target.ptrace import iovec
from tests.support.fake_cpython import (
    HEAP,
    HEAP_SIZE,
    LAYOUTS,
    OWNER_CSTACK,
    OWNER_GENERATOR,
    REGS,
    TID,
    TYPES,
    UNMAPPED,
    FakeTarget,
    capture,
    chain,
    decode,
    names_of,
    planned,
    planned_chain,
    session_over,
)


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_intact_chain_decodes_completely(target):
    info, _ = chain(target, ["c", "b", "a"])
    stack, _wanted = capture(target, info)
    assert stack.status is CaptureStatus.OK
    (frames, cut), codes = decode(target, stack)
    assert not cut
    assert names_of(codes, frames) == ["c", "b", "a"]
    lines = [codes.get(f.code).line(f.offset) for f in frames]
    assert lines == [11, 21, 31]  # each table says "+1 line" for the instruction at position 1


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_looping_chain_is_truncated(target):
    info, frames = chain(target, ["c", "b", "a"])
    target.link(frames[2], frames[0])
    stack, _ = capture(target, info)
    assert stack.status is CaptureStatus.TRUNCATED_LOOP
    (decoded, _cut), codes = decode(target, stack)
    assert names_of(codes, decoded) == ["c", "b", "a"]


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize(
    ("pointer", "status"),
    [
        (UNMAPPED, CaptureStatus.TRUNCATED_UNREADABLE),
        (HEAP + 3, CaptureStatus.TRUNCATED_BAD_POINTER),
        (1 << 60, CaptureStatus.TRUNCATED_BAD_POINTER),
        (HEAP + HEAP_SIZE - 8, CaptureStatus.TRUNCATED_UNREADABLE),  # a frame running off the mapping
    ],
)
def test_bad_frame_pointer_is_truncated(target, pointer, status):
    info, frames = chain(target, ["c", "b", "a"])
    target.link(frames[1], pointer)
    stack, _ = capture(target, info)
    assert stack.status is status
    (decoded, cut), codes = decode(target, stack)
    assert names_of(codes, decoded) == ["c", "b"] and not cut


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize("garbage", ["not-code", "unmapped", "odd"])
def test_garbage_code_pointer_truncates_the_decode(target, garbage):
    info, frames = chain(target, ["c", "b", "a"])
    bad = {"not-code": target.string("a str, not a code object"), "unmapped": UNMAPPED, "odd": HEAP + 1}[garbage]
    target.put(frames[1] + target.layout.frame.code, "Q", bad)
    stack, _ = capture(target, info)
    (decoded, cut), codes = decode(target, stack)
    assert cut
    assert names_of(codes, decoded) == ["c"]


@pytest.mark.parametrize("target", LAYOUTS[:1], indirect=True)
def test_endless_chain_stops_at_the_depth_bound(target):
    code = target.code("deep", 1)
    previous = 0
    for _ in range(MAX_FRAMES + 10):
        previous = target.frame(code, previous)
    stack, _ = capture(target, target.thread_state(previous))
    assert stack.status is CaptureStatus.TRUNCATED_DEPTH
    assert len(stack.frames) == MAX_FRAMES


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_second_capture_is_two_syscalls(target):
    """A capture in the stop with a plan: the plan's ranges with one syscall, and the code objects' headers,
    which plans do not hold, with one scatter read."""
    info, _ = chain(target, ["e", "d", "c", "b", "a"])
    reader = ScatterReader(1, capacity=4 << 20, readv=target.readv)
    _stack, wanted = capture(target, info, reader)
    assert wanted is not None
    reader.plan = build_plan(*wanted)
    target.syscalls = 0
    stack, wanted = capture(target, info, reader)
    assert target.syscalls == 2 and wanted is None
    (decoded, _), codes = decode(target, stack)
    assert names_of(codes, decoded) == ["e", "d", "c", "b", "a"]


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_reads_outside_the_plan_take_whole_pages(target):
    """A chain the plan has not met (the first capture, or a deep recursion built anew): each read copies
    the whole pages around what it needs, so frames allocated next to each other cost one syscall per
    page, not one each; a frame on a later page is read then."""
    names = [f"f{i}" for i in range(12)]
    codes = {name: target.code(name, 10) for name in names}
    frame_size = max(target.layout.frame.size, target.layout.frame.localsplus) + 16
    per_page = PAGE_SIZE // frame_size
    assert per_page >= 3, "the fake's frames must share pages for this test to mean anything"
    target.top = (target.top + PAGE_SIZE - 1) & -PAGE_SIZE
    previous = 0
    frames = []
    for name in reversed(names):  # the outermost first, as a recursion allocates them
        previous = target.frame(codes[name], previous, position=1)
        frames.append(previous)
    pages = {addr // PAGE_SIZE for addr in frames}
    target.syscalls = 0
    stack, wanted = capture(target, target.thread_state(previous))
    assert wanted is not None and stack.status is CaptureStatus.OK
    # the thread state's read, 3.11/3.12's cframe on the C stack, and one scatter read of the code headers
    frame_reads = target.syscalls - 2 - (target.layout.thread.cframe_current_frame is not None)
    assert frame_reads <= len(pages) < len(names), (frame_reads, len(pages))
    (decoded, _), codes_cache = decode(target, stack)
    assert names_of(codes_cache, decoded) == names


NESTING = [pytest.param(TABLES[v], id=f"3.{v[1]}") for v in [(3, 11), (3, 12)]]


def leftover_chain(target: FakeTarget, kind: str) -> int:
    """What a new ``_PyCFrame``'s ``current_frame`` may hold before its eval loop sets it: a C-stack
    leftover (``ChainCopier._check_enclosing``)."""
    if kind in ("shim", "two records"):
        leftover = target.frame(target.code("leftover", 1), 0, owner=OWNER_CSTACK)
        target.link(leftover, 1)  # not set yet
        if kind == "two records":
            leftover = target.frame(target.string("not a code object"), leftover)
        return leftover
    if kind == "ends in NULL":
        return target.frame(target.code("leftover", 1), 0)
    return target.frame(target.string("not a code object"), 0)


def enter_eval_loop(target: FakeTarget, info: ThreadStateInfo, current_frame: int, previous: int) -> int:
    """Point the thread at a new cframe, below the current one on the C stack; returns the new cframe."""
    t = target.layout.thread
    cframe = target.push(32)
    target.put(cframe + t.cframe_current_frame, "Q", current_frame)
    target.put(cframe + t.cframe_previous, "Q", previous)
    target.put(info.addr + t.frame, "Q", cframe)
    return cframe


LEFTOVERS = ["shim", "two records", "ends in NULL", "not code, ends in NULL"]


@pytest.mark.parametrize("leftover_kind", LEFTOVERS)
@pytest.mark.parametrize("target", NESTING, indirect=True)
def test_a_thread_stopped_entering_its_eval_loop_shows_the_enclosing_python_stack(target, leftover_kind):
    """``_PyEval_EvalFrameDefault`` points ``tstate->cframe`` at its new ``_PyCFrame`` before it sets that
    cframe's ``current_frame``, which still holds a C-stack leftover: a shim-like record whose ``previous``
    is not a pointer (3.12); a returned call's frame being reused (3.11: two records here); or a record
    whose chain ends at once, with a code object or without one (3.11, entering a generator). None of them
    reaches the enclosing cframe's frame, so the walk falls back to the enclosing cframe's chain (here
    ``previous``, stored in the same instruction as ``current_frame``, was left there by an earlier call at
    the same depth)."""
    t = target.layout.thread
    info, frames = chain(target, ["caller", "main"])  # the Python stack of the eval loop that calls out
    outer_cframe = int.from_bytes(target.read(info.addr + t.frame, 8), "little")
    entering = enter_eval_loop(target, info, leftover_chain(target, leftover_kind), outer_cframe)
    stack, wanted = capture(target, info)
    assert stack.status is CaptureStatus.OK
    (decoded, cut), codes = decode(target, stack)
    assert names_of(codes, decoded) == ["caller", "main"] and not cut
    # the next plan holds both cframes, so a snapshot in the same state needs no second stop
    cframes = {addr for addr, _size in wanted[1]}
    assert entering in cframes and outer_cframe in cframes


@pytest.mark.parametrize("previous", ["zero", "heap", "below"])
@pytest.mark.parametrize("target", NESTING, indirect=True)
def test_a_thread_stopped_before_its_new_cframe_links_back_is_stopped_again(target, previous):
    """The new cframe's ``previous`` is a leftover too, and not a cframe: neither the thread's
    ``root_cframe`` nor further up the C stack. Nothing read leads to the Python stack (the enclosing eval
    loop's), so the capture has no frames and is ``TRUNCATED_ENTERING``, and after resume ``settle`` asks
    for another stop, which finds the eval loop entered."""
    t = target.layout.thread
    info, frames = chain(target, ["caller", "main"])
    session = session_over(target, info)
    planned(session, target)
    outer_cframe = int.from_bytes(target.read(info.addr + t.frame, 8), "little")
    garbage = {"zero": 0, "heap": frames[0], "below": target.sp - 4096}[previous]
    entering = enter_eval_loop(target, info, leftover_chain(target, "two records"), garbage)
    stack, _ = capture(target, info)
    assert stack.status is CaptureStatus.TRUNCATED_ENTERING and stack.frames == []
    # the plan lacks the new cframe: the walk of the snapshot misses it, and the second stop walks in full
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE and session.stats.entering == 0
    assert session.snapshot(TID, REGS) is None
    data = session.capture(TID, REGS)
    assert data.status is CaptureStatus.TRUNCATED_ENTERING
    assert session.settle(data) is RECAPTURE and session.stats.entering == 1
    # the eval loop's entry goes on: one store sets both fields (ceval.c, as the builds here compile it)
    callee = target.frame(target.code("callee", 7), frames[0], position=1)
    target.put(entering + t.cframe_current_frame, "Q", callee)
    target.put(entering + t.cframe_previous, "Q", outer_cframe)
    again = session.capture(TID, REGS)
    (decoded, cut), _ = decode(target, again, session.codes)
    assert names_of(session.codes, decoded) == ["callee", "caller", "main"] and not cut


@pytest.mark.parametrize("target", NESTING, indirect=True)
def test_a_nested_eval_loop_keeps_the_whole_chain(target):
    """C called back into Python (``sorted(key=f)``, a ctypes callback): the inner eval loop's first frame
    links to the enclosing cframe's ``current_frame``, so the chain passes through it and is kept whole."""
    t = target.layout.thread
    info, frames = chain(target, ["callback", "caller", "main"])
    outer_cframe = int.from_bytes(target.read(info.addr + t.frame, 8), "little")
    target.put(outer_cframe + t.cframe_current_frame, "Q", frames[1])  # the caller, blocked in its C call
    enter_eval_loop(target, info, frames[0], outer_cframe)
    stack, _ = capture(target, info)
    assert stack.status is CaptureStatus.OK
    (decoded, cut), codes = decode(target, stack)
    assert names_of(codes, decoded) == ["callback", "caller", "main"] and not cut


@pytest.mark.parametrize("target", [pytest.param(TABLES[(3, 12)], id="3.12")], indirect=True)
def test_shims_mark_the_frame_newer_than_them_3_12(target):
    # innermost first: SHIM (an activation with no frame yet), h, SHIM, g, f, SHIM: the outer activation
    # started with f and ran g inline; C code called back into Python for h
    f = target.frame(target.code("f", 1), 0)
    outer_shim = target.frame(0, 0, owner=OWNER_CSTACK)
    target.link(f, outer_shim)
    g = target.frame(target.code("g", 2), f)
    mid_shim = target.frame(0, g, owner=OWNER_CSTACK)
    h = target.frame(target.code("h", 3), mid_shim)
    lead_shim = target.frame(0, h, owner=OWNER_CSTACK)
    stack, _ = capture(target, target.thread_state(lead_shim))
    (frames, cut), codes = decode(target, stack)
    assert not cut
    assert [(f.shim, f.entry) for f in frames] == [
        (True, True),  # leading shim: its activation's only frame
        (False, True),  # h: first frame of its activation
        (True, False),
        (False, False),  # g: called inline by f
        (False, True),  # f: first frame of the outer activation
        (True, False),
    ]
    assert all(f.code == SHIM_KEY for f in frames if f.shim)
    assert names_of(codes, frames) == ["h", "g", "f"]


@pytest.mark.parametrize("target", [pytest.param(TABLES[(3, 12)], id="3.12")], indirect=True)
def test_frames_in_their_prologue_are_left_out_unless_an_entry(target):
    """CPython leaves a frame before its code's first RESUME out of tracebacks (``_PyFrame_IsIncomplete``),
    and one never gets past it: 3.13's ``_Py_InitCleanup`` (``_co_firsttraceable`` 4, its instruction at 0),
    pushed under a specialized ``__init__`` call. A generator's frame, and an activation's entry frame (which
    the merge pairs with its eval loop), are kept."""
    f = target.frame(target.code("f", 1), 0)
    shim = target.frame(0, 0, owner=OWNER_CSTACK)
    target.link(f, shim)
    cleanup = target.frame(target.code("__init__", 1, first_traceable=4), f, position=0)
    init = target.frame(target.code("K.__init__", 5, first_traceable=1), cleanup, position=1)
    gen = target.frame(target.code("gen", 9, first_traceable=2), init, position=0, owner=OWNER_GENERATOR)
    starting = target.frame(target.code("starting", 12, first_traceable=1), gen, position=0)
    entry_shim = target.frame(0, starting, owner=OWNER_CSTACK)
    called = target.frame(target.code("called_from_c", 20, first_traceable=1), entry_shim, position=0)
    stack, _ = capture(target, target.thread_state(called))
    (frames, cut), codes = decode(target, stack)
    assert not cut
    # innermost first: called_from_c is an entry (in its prologue, kept), "starting" and the cleanup are not
    assert names_of(codes, frames) == ["called_from_c", "gen", "K.__init__", "f"]
    assert [f.entry for f in frames if not f.shim] == [True, False, False, True]


@pytest.mark.parametrize("target", [pytest.param(TABLES[(3, 12)], id="3.12")], indirect=True)
def test_locals_are_aligned_with_the_python_frames_across_shims(target, monkeypatch):
    """``nprof dump --locals`` pairs each shown Python frame with an entry of ``locals()``: shims (a Python
    function called from C) and frames left out get none, or every frame above one got the locals of the
    frame it called."""
    outer = target.frame(target.code("outer", 1), 0)
    shim = target.frame(0, outer, owner=OWNER_CSTACK)
    key = target.frame(target.code("key", 5), shim)
    session = session_over(target, target.thread_state(key))
    monkeypatch.setattr(LocalsReader, "frame_locals", lambda self, frame, code: [("frame", frame)])
    stack = session.capture(TID, REGS)
    assert session.locals(stack) == [[("frame", key)], [("frame", outer)]]


@pytest.mark.parametrize("target", [pytest.param(TABLES[(3, 11)], id="3.11")], indirect=True)
def test_is_entry_3_11(target):
    a = target.frame(target.code("a", 1), 0, is_entry=1)
    b = target.frame(target.code("b", 2), a, is_entry=0)
    c = target.frame(target.code("c", 3), b, is_entry=1)
    stack, _ = capture(target, target.thread_state(c))
    (frames, _), _codes = decode(target, stack)
    assert [f.entry for f in frames] == [True, False, True]


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_stops_new_code_objects_are_decoded_with_two_reads(target):
    """The code objects first seen in a stop are decoded together: the first bytes of every name, file name
    and line table with one scatter read, then every header again with one more (each code object took
    4-5 reads of its own: ~45 us of the stop apiece in a pytest run). A string longer than the first read
    costs one read more, for that string alone."""
    info, _ = chain(target, ["e", "d", "c", "b", "a"])
    session = session_over(target, info)
    single: list[int] = []

    def read(addr: int, size: int) -> bytes:
        single.append(addr)
        return target.read(addr, size)

    layout = target.layout
    session.codes = CodeCache(read, layout.code, layout.objects, TYPES, read_ranges=session._read_ranges)
    stack, _ = capture(target, info, session._reader)
    target.syscalls = 0
    assert session.codes.decode_new(stack)
    assert target.syscalls == 2 and single == []
    (decoded, cut), _ = decode(target, stack, session.codes)
    assert names_of(session.codes, decoded) == ["e", "d", "c", "b", "a"] and not cut
    assert [session.codes.get(f.code).line(f.offset) for f in decoded] == [11, 21, 31, 41, 51]
    assert session.codes.stats.decoded == 5

    long_name = "x" * 300  # past the first read of its str (and of its file name, "<name>.py" here)
    code = target.code(long_name, 7)
    frame = target.frame(code, 0, position=1)
    stack, _ = capture(target, target.thread_state(frame), session._reader)
    target.syscalls = 0
    session.codes.decode_new(stack)
    assert target.syscalls == 2 and len(single) == 2  # the two scatter reads; the rest of each string
    (decoded, _), _ = decode(target, stack, session.codes)
    assert names_of(session.codes, decoded) == [long_name]


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_reused_code_address_gets_a_new_key(target):
    info, frames = chain(target, ["c", "b", "a"])
    stack, _ = capture(target, info)
    (first, _), codes = decode(target, stack)
    # the code object of "b" is freed and a different function is born at the same address
    c = target.layout.code
    code_b = stack.frames[1][1]
    target.put(code_b + c.name, "Q", target.string("reborn"))
    if c.qualname is not None:
        target.put(code_b + c.qualname, "Q", target.string("Q.reborn"))
    target.put(code_b + c.firstlineno, "i", 77)
    if c.version is not None:
        target.put(code_b + c.version, "I", 999)
    again, _ = capture(target, info)
    (second, _), _ = decode(target, again, codes)
    assert names_of(codes, second) == ["c", "reborn", "a"]
    assert second[1].code != first[1].code and second[1].code & ((1 << 48) - 1) == code_b
    assert codes.get(first[1].code).name.endswith("b")  # the old key still describes the old function
    assert [f.code for f in second[::2]] == [f.code for f in first[::2]]
    assert codes.stats.reused_addresses == 1


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_code_object_made_again_takes_the_key_of_the_one_it_repeats(target):
    """``exec`` in a loop makes the same function again and again: a new code object with the name, file,
    first line and line table of one decoded before takes its key, at another address or at the same one,
    so its frames and the stacks through them are that one's, and a recording does not grow with each."""
    older = target.code("f", 10, version=1)
    newer = target.code("f", 10, version=2)  # the same function made again elsewhere: its own strings
    outer = target.frame(older, 0, position=1)
    inner = target.frame(newer, outer, position=1)
    stack, _ = capture(target, target.thread_state(inner))
    (frames, _), codes = decode(target, stack)
    key = frames[0].code  # (the one decoded first)
    assert frames[1].code == key and key in (older, newer) and codes.stats.same_content == 1
    # freed, and made once more at the same address
    c = target.layout.code
    target.put(newer + c.name, "Q", target.string("f"))
    if c.qualname is not None:
        target.put(newer + c.qualname, "Q", target.string("Q.f"))
    if c.version is not None:
        target.put(newer + c.version, "I", 3)
    again, _ = capture(target, target.thread_state(inner))
    (second, _), _ = decode(target, again, codes)
    assert [f.code for f in second] == [key, key] and codes.stats.same_content == 2
    # one that differs in its first line only is another function
    other = target.code("f", 11, version=4)
    third, _ = capture(target, target.thread_state(target.frame(other, outer, position=1)))
    (frames, _), _ = decode(target, third, codes)
    assert frames[0].code == other and frames[1].code == key and names_of(codes, frames) == ["f", "f"]


@pytest.mark.parametrize("target", LAYOUTS[:1], indirect=True)
def test_code_that_cannot_be_decoded_is_unknown(target):
    """A pointer that is no live code object when its strings are read (here: freed, pymalloc's link over
    ob_refcnt) is not named at all: the decode re-reads the header and refuses it."""
    info, _ = chain(target, ["c", "b", "a"])
    stack, _ = capture(target, info)
    code_b = stack.frames[1][1]
    target.put(code_b, "Q", HEAP + 0x1000)  # pymalloc's free() stores the free-list link over ob_refcnt
    (frames, cut), codes = decode(target, stack)
    assert not cut and frames[1].code == UNKNOWN_KEY
    assert codes.stats.unreadable == 1


def test_plan_coalesces_near_ranges_and_keeps_fixed_reads_first():
    fixed = [(0x9000_0000, 168)]
    rest = [(0x1000_0100, 72), (0x1000_0000, 72), (0x1000_0000, 144), (0x1000_1100, 72), (0x3000_0000, 144)]
    plan = build_plan(fixed, rest)
    ranges = [(plan.remote[2 * i], plan.remote[2 * i + 1]) for i in range(plan.count)]
    # gaps below a page merge (0x148 .. 0x1100), a far range does not
    assert ranges == [(0x9000_0000, 168), (0x1000_0000, 0x1100 + 72), (0x3000_0000, 144)]
    offset, size, index = plan.where[0x1000_0100]
    assert (offset, size, index) == (168 + 0x100, 72, 1)
    assert plan.where[0x1000_0000][1] == 144
    # an address that was not planned, inside a range that was read: found by range, not by address
    assert plan.find(0x1000_0800, 64, done=3) == 168 + 0x800
    assert plan.find(0x1000_1100 + 40, 64, done=3) == -1  # runs past the range's end
    assert plan.find(0x1000_0800, 64, done=1) == -1  # that range was not read completely
    assert plan.find(0x0FFF_0000, 8, done=3) == -1  # below every range
    assert plan.find(0x9000_0010, 8, done=3) == 0x10  # the fixed reads count too


def test_plan_near_its_byte_budget_reads_a_range_alone_rather_than_the_gap_before_it(monkeypatch):
    """Merging copies the gap too: where that would overrun the budget, the range is read on its own, so
    the plan still holds every frame it can (a plan cut short misses at every sample)."""
    monkeypatch.setattr("agents.cpython.plan.MAX_PLAN_BYTES", 1100)
    rest = [(0x1000_0000 + 450 * i, 100) for i in range(4)]  # frame objects 450 bytes apart, 100 read of each
    plan = build_plan([], rest)
    ranges = [(plan.remote[2 * i], plan.remote[2 * i + 1]) for i in range(plan.count)]
    assert ranges == [(0x1000_0000, 2 * 450 + 100), (0x1000_0000 + 3 * 450, 100)]
    assert plan.total == 1100 and all(plan.find(addr, 100, done=plan.count) >= 0 for addr, _ in rest)


def test_an_oversized_plan_keeps_what_its_walks_used_and_drops_the_rest():
    """A plan holds the union of the paths its thread took. Cut back to one capture's reads at each sample
    that needed less than half of it, a loop alternating between two paths missed at every switch; never
    cut back, a plan kept an earlier phase's ranges for good. After SHRINK_AFTER captures without a miss,
    the ranges no walk used go, and those any walk used stay."""
    tstate = (0x9000_0000, 168)
    earlier = [(0x1000_0000 + 0x10000 * i, 64) for i in range(10)]  # a warm-up's code headers, scattered
    path_a = [(0x2000_0000 + 0x10000 * i, 64) for i in range(3)]
    path_b = [(0x3000_0000 + 0x10000 * i, 64) for i in range(3)]
    slot = ThreadSlot(TID, ThreadStateInfo(tstate[0], 0, TID, TID, 0))
    slot.note(([tstate], earlier + path_a + path_b), True, None)
    slot.rebuild()
    for i in range(SHRINK_AFTER):
        path = path_a if i % 2 else path_b  # the loop alternates; the warm-up is over
        for addr, size in [tstate, *path]:
            assert slot.plan.find(addr, size, done=slot.plan.count) >= 0
        slot.note(([tstate], path), False, None)  # oversized: copy() offers this capture's reads
        if i < SHRINK_AFTER - 1:
            assert slot.pending is None, "kept while it has not served long enough"
    slot.rebuild()
    kept = set(slot.plan.where)
    assert {addr for addr, _ in path_a + path_b} <= kept
    assert not kept & {addr for addr, _ in earlier}


def test_a_capture_with_nothing_to_plan_from_leaves_the_plan_alone():
    """A capture that missed a read and then found its thread state stale (the thread exited, its tid
    reused) asks for no plan: nothing is pending, and the next rebuild has nothing to do."""
    slot = ThreadSlot(TID, ThreadStateInfo(0x9000_0000, 0, TID, TID, 0))
    slot.note(None, True, None)
    assert slot.pending is None
    slot.rebuild()
    assert slot.plan.count == 0


@pytest.mark.parametrize("target", LAYOUTS[:1], indirect=True)
def test_reader_recovers_from_a_plan_that_hits_unmapped_memory(target):
    info, frames = chain(target, ["c", "b", "a"])
    reader = ScatterReader(1, capacity=4 << 20, readv=target.readv)
    _stack, wanted = capture(target, info, reader)
    fixed, rest = wanted
    reader.plan = build_plan(fixed, [(UNMAPPED, 64), *rest])  # a planned range that is gone now
    stack, _ = capture(target, info, reader)
    assert stack.status is CaptureStatus.OK and len(stack.frames) == 3
    assert reader.done < reader.plan.count


def test_iovec_layout_matches_the_kernel_abi():
    assert ctypes.sizeof(iovec) == 16


def _other_states(target: FakeTarget, count: int) -> list[int]:
    """``count`` thread states of other threads than TID's: ids 0x7F00_0000_0000 + i, tids 1000 + i."""
    t = target.layout.thread
    tstates = [target.alloc(t.size) for _ in range(count)]
    for i, tstate in enumerate(tstates):
        target.put(tstate + t.thread_id, "Q", 0x7F00_0000_0000 + i)
        if t.native_thread_id is not None:
            target.put(tstate + t.native_thread_id, "Q", 1000 + i)
    return tstates


def _linked(target: FakeTarget, tstates: list[int]) -> int:
    """A new interpreter whose thread list is ``tstates``, newest first; returns its address."""
    layout, t = target.layout, target.layout.thread
    interp = target.alloc(max(layout.interpreter.threads_head, layout.interpreter.next) + 16)
    for tstate, nxt in zip(tstates, [*tstates[1:], 0]):
        target.put(tstate + t.next, "Q", nxt)
        target.put(tstate + t.interp, "Q", interp)
    target.put(interp + layout.interpreter.threads_head, "Q", tstates[0])
    return interp


def _interpreter_with_threads(target: FakeTarget, count: int) -> tuple[int, list[int]]:
    """_PyRuntime -> one interpreter -> ``count`` thread states (newest first); returns (runtime, tstates)."""
    runtime = target.alloc(2048)
    tstates = _other_states(target, count)
    target.put(runtime + target.layout.runtime.interpreters_head, "Q", _linked(target, tstates))
    return runtime, tstates


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_thread_walk_maps_every_thread(target):
    runtime, tstates = _interpreter_with_threads(target, 5)
    found = walk_thread_states(target.read, runtime, target.layout)
    assert found.complete and [s.addr for s in found.states] == tstates
    native = target.layout.thread.native_thread_id is not None
    keys = [1000 + i if native else 0x7F00_0000_0000 + i for i in range(5)]
    assert [found.by_key[k].addr for k in keys] == tstates


def _listed(target: FakeTarget, info: ThreadStateInfo, newer: int, older: int = 1) -> ThreadMap:
    """One interpreter whose list holds ``newer`` other threads' states, then ``info``'s, then ``older``
    others'; returns what a walk made before ``info``'s thread started saw (the older states only)."""
    others = _other_states(target, newer + older)
    interp = _linked(target, [*others[:newer], info.addr, *others[newer:]])
    walked = [ThreadStateInfo(addr, interp, 0, 0, 0) for addr in others[newer:]]
    return ThreadMap({}, walked, [interp], True)


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_new_threads_state_is_found_among_the_newest(target):
    """A new state is linked at the head of its interpreter's list, behind those made after it; the search
    in a stop reads no further than NEW_STATES_SEARCHED of them."""
    info, _frames = chain(target, ["b", "a"])
    interp = _listed(target, info, newer=2).interpreters[0]
    found = find_new_thread_state(target.read, interp, 0, target.layout, TID)
    assert found is not None and found.addr == info.addr and found.interp == interp
    assert find_new_thread_state(target.read, interp, 0, target.layout, TID + 1) is None
    deep, _frames = chain(target, ["b", "a"])
    interp = _listed(target, deep, newer=NEW_STATES_SEARCHED).interpreters[0]
    assert find_new_thread_state(target.read, interp, 0, target.layout, TID) is None


@pytest.mark.parametrize("target", LAYOUTS[:2], indirect=True)
def test_a_state_holding_its_creators_id_is_not_taken_for_the_creator(target):
    """<=3.10: a new state holds the id of the thread that made it until its own thread starts, with an
    empty chain; the search for the creator's key does not return it."""
    info, _frames = chain(target, ["b", "a"])
    newborn = target.thread_state(0)  # the creator's key (TID), nothing run yet
    interp = _linked(target, [newborn.addr, info.addr])
    assert find_new_thread_state(target.read, interp, 0, target.layout, TID) is None


class Bootstrapping:
    """A read function over ``target`` under which a new thread starts right after the walk read its state
    from the list: its ids become its own, and it runs a frame, before the walk reads its chain."""

    def __init__(self, target: FakeTarget, newborn: int, own_key: int, frame: int) -> None:
        """``frame``: what its ``tstate->frame`` (<=3.10) or ``tstate->cframe`` (3.11/3.12) becomes."""
        self.target, self.newborn, self.own_key, self.frame = target, newborn, own_key, frame

    def read(self, addr: int, size: int) -> bytes:
        data = self.target.read(addr, size)
        if addr == self.newborn and self.frame:  # the list's read of its ids: then the thread starts
            t = self.target.layout.thread
            self.target.put(self.newborn + t.thread_id, "Q", self.own_key)
            if t.native_thread_id is not None:
                self.target.put(self.newborn + t.native_thread_id, "Q", self.own_key)
            self.target.put(self.newborn + t.frame, "Q", self.frame)
            self.frame = 0
        return data


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_new_thread_that_starts_during_the_walk_is_not_taken_for_its_creator(target):
    """Up to 3.11 a new state holds its creator's ids until its thread starts and runs a frame. When that
    happens between the walk's read of the ids and of the chain, the creator keeps its own state; before,
    a 3.9 main thread was mapped to its newest worker's in 4 of 128 walks of a thread-per-request program."""
    info, _frames = chain(target, ["b", "a"])  # the creator, running
    t = target.layout.thread
    newborn = target.thread_state(0)  # made by the creator, with its ids, nothing run yet (3.12+ has no ids)
    if t.cframe_current_frame is not None:  # (3.11/3.12: its chain starts at its own cframe, empty)
        target.put(newborn.addr + t.frame, "Q", 0)
    runtime = target.alloc(2048)
    target.put(runtime + target.layout.runtime.interpreters_head, "Q", _linked(target, [newborn.addr, info.addr]))
    key = TID if t.native_thread_id is not None else 0x7F00_0000_0000  # TID's pthread_t on <=3.10
    chain_root = target.frame(target.code("run", 1), 0)
    if t.cframe_current_frame is not None:  # 3.11/3.12: the frame of its eval loop's cframe
        cframe = target.alloc(32)
        target.put(cframe + t.cframe_current_frame, "Q", chain_root)
        chain_root = cframe
    started = Bootstrapping(target, newborn.addr, TID + 7, chain_root)
    if t.native_thread_id is None:
        for tstate in (info.addr, newborn.addr):
            target.put(tstate + t.thread_id, "Q", key)
    found = walk_thread_states(started.read, runtime, target.layout)
    assert found.complete and found.by_key[key].addr == info.addr
    assert started.frame == 0, "the thread started during the walk"


def test_a_thread_searches_for_its_state_a_few_times_at_most():
    walks = WalkSchedule()
    assert [walks.may_search(TID) for _ in range(NEW_THREAD_SEARCHES + 2)] == [True] * NEW_THREAD_SEARCHES + [
        False
    ] * 2
    assert walks.may_search(TID + 1)


def _one_thread_in_two_interpreters(target: FakeTarget, sub_runs: bool, main_runs: bool) -> tuple[int, int, int]:
    """_PyRuntime -> a subinterpreter (the list head, newest) -> the main interpreter, each with one thread
    state of the same OS thread, whose chain holds a frame or is empty. Returns (runtime, sub's, main's)."""
    layout, t = target.layout, target.layout.thread
    runtime = target.alloc(2048)
    interps = [target.alloc(max(layout.interpreter.threads_head, layout.interpreter.next) + 16) for _ in range(2)]
    target.put(runtime + layout.runtime.interpreters_head, "Q", interps[0])
    target.put(interps[0] + layout.interpreter.next, "Q", interps[1])
    states = []
    for interp, runs in zip(interps, (sub_runs, main_runs)):
        tstate = target.alloc(t.size)
        target.put(tstate + t.interp, "Q", interp)
        target.put(tstate + t.thread_id, "Q", 0x7F00_0000_0000)
        if t.native_thread_id is not None:
            target.put(tstate + t.native_thread_id, "Q", TID)
        frame = target.frame(target.code("f", 1), 0) if runs else 0
        if t.cframe_current_frame is not None:
            cframe = target.alloc(32)
            target.put(cframe + t.cframe_current_frame, "Q", frame)
            target.put(tstate + t.frame, "Q", cframe)
        else:
            target.put(tstate + t.frame, "Q", frame)
        target.put(interp + layout.interpreter.threads_head, "Q", tstate)
        states.append(tstate)
    return runtime, states[0], states[1]


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize(
    ("sub_runs", "main_runs", "chosen", "nested"),
    [(False, True, "main", False), (True, True, "sub", True), (True, False, "sub", False),
     (False, False, "sub", False)],  # fmt: skip
)
def test_a_thread_in_two_interpreters_maps_to_the_state_that_runs(target, sub_runs, main_runs, chosen, nested):
    """A subinterpreter's state stays bound to the thread that created it, its chain empty once its code
    returned: 3.12's main thread lost all its Python frames to it. The newest interpreter's state that
    holds frames is read, and when an older one's holds frames too, the capture says they run outward."""
    runtime, sub, main = _one_thread_in_two_interpreters(target, sub_runs, main_runs)
    found = walk_thread_states(target.read, runtime, target.layout)
    key = TID if target.layout.thread.native_thread_id is not None else 0x7F00_0000_0000
    expected = {"sub": sub, "main": main}[chosen]
    assert found.complete and found.by_key[key].addr == expected
    assert found.shared == {expected} and (found.nested == {expected}) is nested


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize("damage", ["loop", "foreign", "unmapped"])
def test_damaged_thread_list_is_cut_not_followed(target, damage):
    runtime, tstates = _interpreter_with_threads(target, 4)
    t = target.layout.thread
    if damage == "loop":
        target.put(tstates[3] + t.next, "Q", tstates[1])
    elif damage == "foreign":
        target.put(tstates[2] + t.interp, "Q", HEAP + 8)  # freed and reused while we walked
    else:
        target.put(tstates[1] + t.next, "Q", UNMAPPED)
    found = walk_thread_states(target.read, runtime, target.layout)
    assert not found.complete
    expected = {"loop": 4, "foreign": 2, "unmapped": 2}[damage]
    assert [s.addr for s in found.states] == tstates[:expected]


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_strings_reused_after_the_stop_do_not_rename_a_function(target):
    """After resume, a function that was on the stack may die, its strings be reused by the next function's
    (same length here, so the bytes simply change) and a successor be allocated at its address while its
    header still shows the dead object's identity. Decoding at the stop names it right; nothing read after
    resume renames it."""
    info, _ = chain(target, ["c", "b", "a"])
    stack, _ = capture(target, info)
    codes = CodeCache(target.read, target.layout.code, target.layout.objects, TYPES)
    codes.decode_new(stack)  # during the stop
    c, o = target.layout.code, target.layout.objects
    code_b = stack.frames[1][1]
    for field in (c.name, c.qualname, c.filename):
        if field is None:
            continue
        text = struct.unpack_from("<Q", target.heap, code_b + field - HEAP)[0] + o.unicode_ascii_size
        target.heap[text - HEAP] = ord("z")  # "b" -> "z", "Q.b" -> "z.b", "b.py" -> "z.py"
    adaptive = target.layout.code.code_adaptive or 0
    frames, _cut = decode_frames(stack, target.layout.frame, adaptive, codes.by_key)  # after resume
    info_b = codes.get(frames[1].code)
    assert info_b.name.endswith("b") and info_b.filename == "b.py"


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_snapshot_settles_to_what_the_stop_saw(target):
    """The stop copies the plan with one syscall and walks nothing; after resume ``settle`` walks those
    bytes, reading only the known code objects' headers (one syscall), and gets the chain as it was at the
    stop, even though the thread has changed it since."""
    info, frames = chain(target, ["c", "b", "a"])
    session = session_over(target, info)
    first = planned(session, target)
    target.syscalls = 0
    data = session.snapshot(TID, REGS)
    assert data is not None and target.syscalls == 1
    target.link(frames[2], target.frame(target.code("later", 5), 0))  # the thread runs on after resume
    settled = session.settle(data)
    assert target.syscalls == 2  # settle read the code headers
    assert isinstance(settled, StackCapture) and settled.status is CaptureStatus.OK
    (decoded, cut), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == ["c", "b", "a"] and not cut
    assert settled.code_keys == first.code_keys and settled.holds_gil == first.holds_gil
    assert session.settle(first) is first  # a capture made in a stop passes through
    assert (session.stats.snapshots, session.stats.recaptured) == (1, 0)


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_the_tracer_copies_a_snapshot_with_the_stack_window_in_one_read(target):
    """``snapshot`` reads nothing itself: the slot it returns names its plan's ranges (``co_read``), and the
    tracer copies them in the same ``process_vm_readv`` as the stack window. A window that cannot be read
    whole copies nothing of the plan, and the walk of that snapshot asks for another stop."""
    info, _ = chain(target, ["c", "b", "a"])
    session = session_over(target, info)
    planned(session, target)
    target.syscalls = 0
    data = CPythonSession.snapshot(session, TID, REGS)  # the hook alone, as the tracer calls it
    assert isinstance(data, ThreadSlot) and target.syscalls == 0 and data.snap.done == 0
    stack = target.alloc(512)
    target.heap[stack - HEAP : stack - HEAP + 512] = bytes(range(256)) * 2
    window = ctypes.create_string_buffer(512)
    n = data.co_read.read_with_stack(1, ctypes.addressof(window), stack, 512)
    assert n == 512 and target.syscalls == 1 and window.raw == bytes(range(256)) * 2
    assert data.snap.done == data.plan.count
    settled = session.settle(data)
    (decoded, cut), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == ["c", "b", "a"] and not cut
    data = CPythonSession.snapshot(session, TID, REGS)
    assert data.co_read.read_with_stack(1, ctypes.addressof(window), UNMAPPED, 512) < 512
    assert data.snap.done == 0 and session.settle(data) is RECAPTURE

@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_snapshot_that_falls_short_asks_for_a_stop(target):
    """A chain that grew past the plan, or a code object born at a known code address (it must be decoded
    while its frame keeps it alive), cannot be settled from the snapshot: ``RECAPTURE``, counted, and the
    capture in the next stop (the sampler's) sees the new chain: a chain that grew past the plan (here
    a newest frame the snapshot lacks) has that stop walk in full; a code object not decoded yet has it
    copy the code object too (``code_prefetch.py``)."""
    info, frames = chain(target, ["c", "b", "a"])
    session = session_over(target, info)
    planned(session, target)
    deeper = target.frame(target.code("deeper", 3), frames[0])  # a call since the last capture
    t = target.layout.thread
    if t.cframe_current_frame is not None:
        cframe = struct.unpack_from("<Q", target.heap, info.addr + t.frame - HEAP)[0]
        target.put(cframe + t.cframe_current_frame, "Q", deeper)
    else:
        target.put(info.addr + t.frame, "Q", deeper)
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE and session.stats.recaptured == 1
    assert session.snapshot(TID, REGS) is None  # the second stop walks
    again = session.capture(TID, REGS)
    (decoded, _), _ = decode(target, again, session.codes)
    assert names_of(session.codes, decoded) == ["deeper", "c", "b", "a"]
    session.bindings.slots[TID].rebuild()
    c = target.layout.code
    code_b = again.frames[2][1]
    target.put(code_b + c.name, "Q", target.string("reborn"))  # "b" freed, another function at its address
    target.put(code_b + c.firstlineno, "i", 77)
    if c.version is not None:
        target.put(code_b + c.version, "I", 999)
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE
    assert session.stats.recaptured == 2 and session.stats.snapshots == 0
    assert session.bindings.slots[TID].ahead is not None and not session.bindings.slots[TID].walk_next


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize("case", ["known", "replaced", "freed", "new", "unreadable"])
def test_a_snapshots_code_objects_are_identified_after_resume(target, case):
    """Plans hold no code-object headers: ``settle`` reads them after resume, one syscall for all, and
    settles the snapshot when each still holds the identity decoded and looks alive. So a function this
    thread had not run before (3.11+: a call at a depth seen before reuses that place on the data stack)
    costs no second stop when the code cache knows it (decoded in another stop, of this thread or
    another). Anything else asks for the stop: another code object at that address (the known one was
    freed, and its address reused), one freed since (``ob_refcnt`` overwritten by the allocator's free
    list), an unreadable header, or a code object never decoded (nothing read: a stop must decode it)."""
    session, frames = planned_chain(target)
    c = target.layout.code
    other = target.code("other", 70, version=9)
    assert session.codes.decode_copied(other, target.read) is not None  # decoded in another stop
    if case == "unreadable":  # known at an address unmapped since
        session.codes._by_addr[UNMAPPED] = session.codes._by_addr[other]
        other = UNMAPPED
    if case == "new":
        other = target.code("never-stopped-in", 80, version=10)
    target.put(frames[1] + target.layout.frame.code, "Q", other)  # "b" returned; "other" called there
    data = session.snapshot(TID, REGS)
    assert data is not None
    if case == "replaced":  # "other" freed, and a new function allocated at its address
        target.put(other + c.name, "Q", target.string("reborn"))
        target.put(other + c.firstlineno, "i", 77)
        if c.version is not None:
            target.put(other + c.version, "I", 999)
    elif case == "freed":
        target.put(other, "q", HEAP + 64)  # pymalloc's free list link where ob_refcnt was
    target.syscalls = 0
    settled = session.settle(data)
    if case != "known":
        assert settled is RECAPTURE and session.stats.recaptured == 1
        assert target.syscalls == (0 if case == "new" else 1)  # nothing read for a code object never decoded
        assert session.stats.code_changed == (case != "new")
        return
    assert isinstance(settled, StackCapture) and target.syscalls == 1
    (decoded, cut), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == ["c", "other", "a"] and not cut
    assert (session.stats.snapshots, session.stats.recaptured, session.stats.code_changed) == (1, 0, 0)
    # the same code objects at the next sample: the thread's check is used again, and still checks
    check = session.bindings.slots[TID].check
    settled = session.settle(session.snapshot(TID, REGS))
    assert isinstance(settled, StackCapture) and session.bindings.slots[TID].check is check
    target.put(other + c.firstlineno, "i", 71)  # another code object at its address now
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE and session.stats.code_changed == 1
    # a code object decoded since (the capture in that second stop): the check is made again
    assert session.capture(TID, REGS).status is CaptureStatus.OK
    session.bindings.slots[TID].rebuild()
    settled = session.settle(session.snapshot(TID, REGS))
    assert isinstance(settled, StackCapture) and session.bindings.slots[TID].check is not check
    (decoded, _), _ = decode(target, settled, session.codes)
    assert session.codes.get(decoded[1].code).firstlineno == 71


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize("case", ["met", "returned", "replaced", "rewritten"])
def test_a_new_code_object_a_snapshot_met_is_decoded_from_the_next_stops_copy(target, case):
    """A snapshot's walk that meets a code object never decoded asks for a second stop (a new one must be
    decoded from bytes copied while a frame keeps it alive). That stop is a snapshot too: after the first
    settle its header and strings were read once, to learn where they are; the stop copies those ranges
    again, in the same ``process_vm_readv`` as the plan, and the second snapshot's walk decides what they are
    worth. Met by that walk, the code object was alive in the stop, and is decoded from its copy alone
    ("met": its name's bytes changed after the stop do not count; "rewritten": changed in place before it,
    the stop's are the ones shown).
    Not met (its function returned: "returned"), it is not decoded, and the next stops copy it again: the
    first that meets it decodes it, with no stop more. Replaced by another code object whose
    strings the stop did not copy ("replaced"), it cannot be decoded from the copy: a stop that walks in
    full comes next (the sampler's third), and names the new one."""
    session, frames = planned_chain(target)
    c = target.layout.code
    fresh = target.code("fresh", 70, version=9)
    code_b = struct.unpack_from("<Q", target.heap, frames[1] + target.layout.frame.code - HEAP)[0]
    target.put(frames[1] + target.layout.frame.code, "Q", fresh)  # "b" returned; "fresh" called there
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE
    slot = session.bindings.slots[TID]
    assert slot.ahead is not None and slot.ahead.codes == [fresh] and not slot.walk_next
    if case == "returned":  # "fresh" returned and "b" was called again at its place
        target.put(frames[1] + target.layout.frame.code, "Q", code_b)
    elif case == "replaced":  # "fresh" freed, another function allocated at its address
        target.put(fresh + c.name, "Q", target.string("reborn"))
        if c.qualname is not None:
            target.put(fresh + c.qualname, "Q", target.string("Q.reborn"))
        if c.version is not None:
            target.put(fresh + c.version, "I", 10)
    elif case == "rewritten":  # the name's str object freed and another of the same length made there
        name = struct.unpack_from("<Q", target.heap, fresh + (c.qualname or c.name) - HEAP)[0] - HEAP
        at = target.heap.index(b"fresh", name)
        target.heap[at : at + 5] = b"fresk"
    target.syscalls = 0
    data = session.snapshot(TID, REGS)
    assert data is not None and target.syscalls == 1  # the plan and the code object's ranges
    if case == "met":  # after resume its name's bytes change: what the stop copied is what counts
        name = struct.unpack_from("<Q", target.heap, fresh + (c.qualname or c.name) - HEAP)[0] - HEAP
        at = target.heap.index(b"fresh", name)
        target.heap[at : at + 5] = b"fresx"
    settled = session.settle(data)
    if case == "replaced":
        assert settled is RECAPTURE and session.stats.decoded_ahead == 0
        again = session.capture(TID, REGS)
        (decoded, _), _ = decode(target, again, session.codes)
        assert names_of(session.codes, decoded) == ["c", "reborn", "a"]
        return
    assert isinstance(settled, StackCapture)
    (decoded, cut), _ = decode(target, settled, session.codes)
    if case == "returned":
        assert names_of(session.codes, decoded) == ["c", "b", "a"] and not cut
        assert session.stats.decoded_ahead == 0 and session.codes.unknown([fresh]) == [fresh]
        assert slot.ahead is not None and slot.ahead.codes == [fresh]
        target.put(frames[1] + target.layout.frame.code, "Q", fresh)  # "fresh" called again, later
        settled = session.settle(session.snapshot(TID, REGS))
        assert isinstance(settled, StackCapture) and session.stats.recaptured == 1
        (decoded, _), _ = decode(target, settled, session.codes)
        assert names_of(session.codes, decoded) == ["c", "fresh", "a"]
        assert session.stats.decoded_ahead == 1 and slot.ahead is None
        return
    assert names_of(session.codes, decoded) == ["c", "fresk" if case == "rewritten" else "fresh", "a"]
    assert target.syscalls == 2  # and the headers' check after resume: nothing else was read
    assert session.stats.decoded_ahead == 1 and slot.ahead is None



@pytest.mark.parametrize("target", LAYOUTS[:1] + LAYOUTS[-1:], indirect=True)
def test_a_snapshot_that_met_too_many_new_code_objects_has_its_next_stop_walk(target, monkeypatch):
    """Past ``code_prefetch.MAX_CODES`` new code objects at once, reading each after resume would cost more
    than the walk in the stop, which decodes them with two scatter reads: the next stop walks."""
    monkeypatch.setattr(code_prefetch, "MAX_CODES", 2)
    session, frames = planned_chain(target)
    for i, frame in enumerate(frames):  # all three returned, and three new functions run in their frames
        target.put(frame + target.layout.frame.code, "Q", target.code(f"new{i}", 70 + i, version=20 + i))
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE
    slot = session.bindings.slots[TID]
    assert slot.ahead is None and slot.walk_next and session.snapshot(TID, REGS) is None
    (decoded, _), _ = decode(target, session.capture(TID, REGS), session.codes)
    assert names_of(session.codes, decoded) == ["new0", "new1", "new2"] and not slot.walk_next

@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_snapshot_whose_chain_left_the_plan_has_its_next_stop_walk(target):
    """A walk of a snapshot that needs a frame outside the plan cannot know the chain past it: the thread's
    next stop (the sampler's second) walks in full (``snapshot`` hands it to ``capture``), rather than copy
    the same plan again to miss at the same place, and the snapshots after that one copy the plan again."""
    session, frames = planned_chain(target)
    between = target.frame(target.code("x", 5, version=7), frames[2], position=1)
    target.link(frames[1], between)  # "b" was called through a new frame, outside the plan
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE and session.bindings.slots[TID].walk_next
    assert session.snapshot(TID, REGS) is None  # the second stop walks
    again = session.capture(TID, REGS)
    (decoded, _), _ = decode(target, again, session.codes)
    assert names_of(session.codes, decoded) == ["c", "b", "x", "a"]
    session.bindings.slots[TID].rebuild()
    settled = session.settle(session.snapshot(TID, REGS))
    assert isinstance(settled, StackCapture) and session.stats.recaptured == 1

@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_frame_a_snapshot_missed_is_planned_though_its_call_returned(target):
    """The frame a snapshot's walk needed outside the plan joins the plan at once, not only what the second
    stop's walk in full meets: a short call has returned by that stop, and its next sample would miss
    at the same place again (a function of 1 us calls never showed on 3.10 at 100 Hz)."""
    session, frames = planned_chain(target)
    code_b = struct.unpack_from("<Q", target.heap, frames[1] + target.layout.frame.code - HEAP)[0]
    between = target.frame(code_b, frames[2], position=1)
    target.link(frames[1], between)  # "b" called itself through a new frame, outside the plan
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE
    target.link(frames[1], frames[2])  # and returned before the second stop
    (decoded, _), _ = decode(target, session.capture(TID, REGS), session.codes)
    assert names_of(session.codes, decoded) == ["c", "b", "a"]
    session.bindings.slots[TID].rebuild()
    target.link(frames[1], between)  # and is called again, its frame where it was
    settled = session.settle(session.snapshot(TID, REGS))
    assert isinstance(settled, StackCapture) and session.stats.recaptured == 1
    (decoded, _), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == ["c", "b", "b", "a"]


@pytest.mark.parametrize("target", LAYOUTS[:1] + LAYOUTS[-1:], indirect=True)
def test_a_new_code_object_is_copied_for_keep_stops_and_no_more(target, monkeypatch):
    """A new code object the thread's next stops do not run (its function returned) is copied in each of
    them, with the plan, for ``KEEP_STOPS`` stops; then no more: its copy costs every stop ~0.6 us a
    range, for a function that takes less than 1/KEEP_STOPS of the thread's samples."""
    monkeypatch.setattr(code_prefetch, "KEEP_STOPS", 3)
    session, frames = planned_chain(target)
    code_b = struct.unpack_from("<Q", target.heap, frames[1] + target.layout.frame.code - HEAP)[0]
    fresh = target.code("fresh", 70, version=9)
    target.put(frames[1] + target.layout.frame.code, "Q", fresh)
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE
    target.put(frames[1] + target.layout.frame.code, "Q", code_b)  # "fresh" returned
    slot = session.bindings.slots[TID]
    for _ in range(3):
        assert slot.ahead is not None and slot.snap.extra is slot.ahead.snap
        target.syscalls = 0
        assert isinstance(session.settle(session.snapshot(TID, REGS)), StackCapture)
        assert target.syscalls == 2  # the plan and the code object's ranges in one read; the headers' check
    assert slot.ahead is None and slot.snap.extra is None and session.stats.recaptured == 1


@pytest.mark.parametrize("target", LAYOUTS[:1], indirect=True)
def test_a_new_code_object_past_one_reads_iovecs_is_copied_with_one_more(target, monkeypatch):
    """A plan and new code objects' ranges that do not fit one ``process_vm_readv`` together (``IOV_MAX``)
    are copied with two, and the code object is decoded all the same."""
    session, frames = planned_chain(target)
    fresh = target.code("fresh", 70, version=9)
    target.put(frames[1] + target.layout.frame.code, "Q", fresh)
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE
    slot = session.bindings.slots[TID]
    ahead = slot.ahead
    assert ahead is not None
    monkeypatch.setattr(scatter, "IOV_MAX", slot.plan.count + ahead.snap.plan.count)
    slot.ahead = None
    slot.ahead = ahead  # attached again under the smaller limit: refused
    assert slot.snap.extra is None
    target.syscalls = 0
    settled = session.settle(session.snapshot(TID, REGS))
    assert isinstance(settled, StackCapture) and target.syscalls == 3  # and the headers' check
    (decoded, _), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == ["c", "fresh", "a"] and session.stats.decoded_ahead == 1


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_stack_of_more_code_objects_than_one_read_takes_settles(target):
    """One ``process_vm_readv`` takes at most ``IOV_MAX`` ranges: the headers of a stack running more
    distinct code objects than that are read in as many reads as it takes, and the snapshot settles (as
    does the first capture, in its stop)."""
    names = [f"f{i}" for i in range(plan.IOV_MAX + 40)]
    codes = [target.code(name, 10) for name in names]
    target.top = (target.top | (PAGE_SIZE - 1)) + 1 + PAGE_SIZE  # frames apart: no range holds a header
    frame = 0
    for code in reversed(codes):
        frame = target.frame(code, frame, position=1)
    info = target.thread_state(frame)
    session = session_over(target, info)
    planned(session, target)
    target.syscalls = 0
    settled = session.settle(session.snapshot(TID, REGS))
    assert isinstance(settled, StackCapture) and target.syscalls == 3  # the snapshot, two of headers
    (decoded, cut), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == names and not cut


@pytest.mark.parametrize("target", LAYOUTS[2:], indirect=True)
def test_a_deeper_call_on_the_newest_frames_page_settles_without_a_stop_3_11(target):
    """3.11+ push a call's frame just above the newest one: a plan reads on to the end of the newest
    frame's page, so a call made since (a recursion going deeper) is found in the snapshot and settles,
    where a plan of exactly the frames seen would have needed a second stop. A frame past that page is
    missed by the walk after resume, and the second stop walks in full."""
    codes = {name: target.code(name, 10 * (i + 1), version=i + 1) for i, name in enumerate("abc")}
    target.top = (target.top | (PAGE_SIZE - 1)) + 1  # a data stack: the frames from a page's start up
    frame = 0
    for name in "abc":  # outermost first, each pushed above the last
        frame = target.frame(codes[name], frame, position=1)
    newest, stack_top = frame, target.top
    target.top = (newest | (PAGE_SIZE - 1)) + 1 + PAGE_SIZE  # the rest of the data stack: free for deeper calls
    info = target.thread_state(newest)
    session = session_over(target, info)
    planned(session, target)
    t = target.layout.thread

    def push(previous: int, at: int) -> int:
        """A call from ``previous``: its frame at ``at``, made the thread's current frame."""
        top, target.top = target.top, at
        frame = target.frame(codes["c"], previous, position=1)
        target.top = top
        if t.cframe_current_frame is not None:
            cframe = struct.unpack_from("<Q", target.heap, info.addr + t.frame - HEAP)[0]
            target.put(cframe + t.cframe_current_frame, "Q", frame)
        else:
            target.put(info.addr + t.frame, "Q", frame)
        return frame

    deeper = push(newest, stack_top)
    assert deeper // PAGE_SIZE == newest // PAGE_SIZE
    target.syscalls = 0
    settled = session.settle(session.snapshot(TID, REGS))
    assert settled is not RECAPTURE and target.syscalls == 2  # the snapshot, the code headers
    (decoded, _), _ = decode(target, settled, session.codes)
    assert names_of(session.codes, decoded) == ["c", "c", "b", "a"]
    push(deeper, (newest | (PAGE_SIZE - 1)) + 1)  # the next call's frame starts the next page
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE and session.bindings.slots[TID].walk_next


@pytest.mark.parametrize("target", LAYOUTS[2:], indirect=True)
def test_a_cframe_that_moves_between_two_places_costs_one_stop_3_11(target):
    """3.11/3.12 reach the newest frame through ``tstate->cframe``, a struct on the C stack of the eval
    loop's current entry: it moves whenever a call goes through C and back. A plan keeps the places it
    was seen at, as it keeps frames, so a thread that goes back and forth between two (in and out of
    ``sorted(key=f)``, say) is captured in full once (in the second stop after the walk of its snapshot
    missed the new place), not at every change."""
    info, frames = chain(target, ["c", "b", "a"])
    t = target.layout.thread
    session = session_over(target, info)
    planned(session, target)
    first = struct.unpack_from("<Q", target.heap, info.addr + t.frame - HEAP)[0]
    target.push(3 * PAGE_SIZE)  # another entry of the eval loop, pages further down the C stack
    second = target.push(32)
    target.put(second + t.cframe_current_frame, "Q", frames[0])
    target.put(second + t.cframe_previous, "Q", info.addr + t.root_cframe)

    def settle_with(cframe: int) -> object:
        target.put(info.addr + t.frame, "Q", cframe)
        settled = session.settle(session.snapshot(TID, REGS))
        if settled is RECAPTURE:  # what the sampler does then: a second stop, which walks in full
            assert session.snapshot(TID, REGS) is None
            session.capture(TID, REGS)
            session.bindings.slots[TID].rebuild()
        return settled

    assert settle_with(second) is RECAPTURE  # a place not seen before
    for cframe in (first, second, first, second):
        settled = settle_with(cframe)
        assert settled is not RECAPTURE
        (decoded, _), _ = decode(target, settled, session.codes)
        assert names_of(session.codes, decoded) == ["c", "b", "a"]
    assert session.stats.recaptured == 1


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
@pytest.mark.parametrize("garbage", ["not-code", "odd", "unmapped"])
def test_a_snapshot_settles_a_garbage_code_pointer_as_the_stop_would(target, garbage):
    """A code pointer that cannot point at an object (misaligned) is cut at once: the settled stack ends
    there, as a capture in the stop ends it, with no second stop. One that points at something the code
    cache does not know (another object, unmapped memory) needs the stop, whose capture reads its header
    then and cuts the stack there."""
    info, frames = chain(target, ["c", "b", "a"])
    bad = {"not-code": target.string("a str, not a code object"), "unmapped": UNMAPPED, "odd": HEAP + 1}[garbage]
    target.put(frames[1] + target.layout.frame.code, "Q", bad)
    session = session_over(target, info)
    planned(session, target)
    settled = session.settle(session.snapshot(TID, REGS))
    if garbage != "odd":
        assert settled is RECAPTURE
        settled = session.capture(TID, REGS)
    (decoded, cut), _ = decode(target, settled, session.codes)
    assert cut and names_of(session.codes, decoded) == ["c"]
    assert session.stats.recaptured == (garbage != "odd")


@pytest.mark.parametrize("target", LAYOUTS[:1], indirect=True)
def test_a_plan_that_missed_keeps_its_old_ranges(target):
    """A stack that alternates between two shapes (3.8-3.10 reuse frame objects from a LIFO free list, so
    a recursion going deeper and back comes back to the same frames) costs one read per capture once the
    plan has seen both, instead of a read per frame the last capture did not have; and what a plan keeps
    stays bounded however many different frames come and go."""
    from agents.cpython.plan import KEEP_MIN
    from agents.cpython.session import ThreadSlot

    t = target.layout.thread
    outer = target.frame(target.code("a", 1), 0)
    shape_a = target.frame(target.code("c", 3), target.frame(target.code("b", 2), outer))
    shape_b = target.frame(target.code("x", 5), target.frame(target.code("y", 4), outer))
    info = target.thread_state(shape_a)
    slot = ThreadSlot(TID, info, readv=target.readv)
    reader = ScatterReader(1, capacity=4 << 20, readv=target.readv)

    def take(innermost: int) -> int:
        target.put(info.addr + t.frame, "Q", innermost)
        reader.plan, target.syscalls = slot.plan, 0
        stack, wanted = capture(target, info, reader)
        assert stack.status is CaptureStatus.OK
        if wanted is not None:
            slot.note(wanted, reader.misses > 0, reader.unread_range())
            slot.rebuild()
        return target.syscalls

    take(shape_a)
    take(shape_b)
    # the plan's ranges, and the code headers in one scatter read (plans do not hold them)
    assert [take(shape) for shape in (shape_a, shape_b) * 3] == [2] * 6
    # a kept range whose memory is gone now (below the heap, so the prefetch stops there) is dropped
    gone = (HEAP - (1 << 30), 64)
    slot.used = (slot.used[0], [*slot.used[1], gone])
    slot.plan = build_plan(*slot.used)
    assert take(shape_a) > 1
    assert gone not in slot.used[1] and take(shape_b) == 2 and take(shape_a) == 2
    for i in range(300):  # a new innermost frame every time: the plan keeps a bounded tail of them
        take(target.frame(target.code(f"f{i}", 10), outer))
    assert len(slot.used[1]) <= 2 * (2 + KEEP_MIN)


def unmapped(capture: StackCapture) -> bool:
    """A capture of a thread with no known thread state: no frames, and nothing for the session to count."""
    return capture.status is CaptureStatus.UNMAPPED and capture.frames == [] and not capture.status.truncated


@pytest.mark.parametrize("target", LAYOUTS[:1], indirect=True)
def test_a_new_thread_with_an_exited_ones_pthread_handle_is_not_read_as_it(target):
    """<=3.10 map OS threads by ``fs_base`` (the pthread handle), which glibc gives a new thread when it
    reuses an exited one's stack. The slot still holds the exited thread's state, freed: a capture for
    another tid is unmapped, not read through it, and asks for one walk of the thread lists at the next
    refresh, as a thread never seen does. One that stays unmapped after two walks (a native thread) does not
    ask again."""
    info, _frames = chain(target, ["b", "a"])
    session = session_over(target, info)
    assert session.capture(TID, REGS).status is CaptureStatus.OK  # binds the slot to TID
    other = TID + 1
    assert session.snapshot(other, REGS) is None
    assert unmapped(session.capture(other, REGS)) and session.stats.unmapped == 1
    assert session.bindings.walks.soon
    session.bindings.walks.soon = False
    assert unmapped(session.capture(other, REGS)) and session.bindings.walks.soon  # no walk since: still asking
    session.bindings.walks.walked(0.0, complete=True)  # a walk
    session.bindings.slots[TID].tid = 0
    assert session.capture(other, REGS).status is CaptureStatus.OK  # the walk re-validated the slot
    session.bindings.slots.clear()
    assert unmapped(session.capture(other + 1, REGS)) and session.bindings.walks.soon  # never seen: asks
    session.bindings.walks.walked(0.0, complete=True)  # a walk that found no state for it
    assert unmapped(session.capture(other + 1, REGS)) and session.bindings.walks.soon  # maybe not bound yet: again
    session.bindings.walks.walked(0.0, complete=True)
    assert unmapped(session.capture(other + 1, REGS)) and not session.bindings.walks.soon  # native: does not ask


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_thread_first_seen_is_captured_with_its_frames_in_its_stop(target):
    """A thread that started since the last walk of the thread lists has its state looked for among the
    newest in its first stops: a thread per request has often exited by the walk after resume, and its
    samples kept no Python frame (5-37% of a thread-per-request target's, 3.8-3.13)."""
    info, _frames = chain(target, ["b", "a"])
    session = session_over(target, info)
    session.bindings.slots.clear()
    session.bindings.threads = _listed(target, info, newer=1)
    assert session.snapshot(TID, REGS) is None  # not planned: captured in the stop
    stack = session.capture(TID, REGS)
    assert stack.status is CaptureStatus.OK and len(stack.frames) == 2, stack
    assert session.stats.found_new == 1 and session.stats.unmapped == 0
    assert session.bindings.walks.soon  # the threads started with it are mapped by a walk between ticks
    assert session.capture(TID, REGS).status is CaptureStatus.OK and session.stats.found_new == 1  # bound now
    native, regs = TID + 1, SimpleNamespace(fs_base=TID + 1)  # no state: searched a few times, then not read
    reads: list[int] = []
    session.bindings.process = SimpleNamespace(read=lambda addr, size: reads.append(addr) or target.read(addr, size))
    for _ in range(NEW_THREAD_SEARCHES):
        assert unmapped(session.capture(native, regs)) and reads
        reads.clear()
    assert unmapped(session.capture(native, regs)) and not reads


@pytest.mark.parametrize("target", LAYOUTS[:2], indirect=True)
def test_an_exited_threads_freed_state_under_the_same_handle_is_passed_over(target):
    """<=3.10: a new thread given an exited one's pthread handle finds, through the slot the last walk made,
    that thread's freed state, which may still hold the handle, with an empty chain. Its own state is looked
    for among the newest, and read."""
    old, _frames = chain(target, ["b", "a"])
    target.put(old.addr + target.layout.thread.frame, "Q", 0)  # the exited thread's state: chain empty
    session = session_over(target, old)  # the walk's slot, not bound to a thread since
    info, _frames = chain(target, ["d", "c"])
    session.bindings.threads = _listed(target, info, newer=0)
    stack = session.capture(TID, REGS)
    assert stack.status is CaptureStatus.OK and len(stack.frames) == 2 and stack.tstate == info.addr, stack


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_snapshot_of_another_threads_state_is_captured_again_with_the_threads_own(target):
    """The slot a walk made for a key may hold, by a thread's first capture since, an exited thread's state
    (<=3.10: the same pthread handle), which now reads as another's: its snapshot is settled as a second
    stop, which looks for the thread's own state among the newest, a few times per thread at most."""
    session, _frames = planned_chain(target)
    t = target.layout.thread
    ident = t.native_thread_id if t.native_thread_id is not None else t.thread_id
    old = session.bindings.slots[TID].info
    target.put(old.addr + ident, "Q", TID + 7)  # freed, and reused by another thread's state
    info, _frames = chain(target, ["e", "d"])
    session.bindings.threads = _listed(target, info, newer=0)
    assert session.settle(session.snapshot(TID, REGS)) is RECAPTURE and session.stats.not_its_own == 1
    assert session.snapshot(TID, REGS) is None  # the second stop captures, and searches
    stack = session.capture(TID, REGS)
    assert stack.status is CaptureStatus.OK and stack.tstate == info.addr and session.stats.found_new == 1
    target.put(info.addr + ident, "Q", TID + 8)  # exited too: no search left to make, kept as stale
    for _ in range(NEW_THREAD_SEARCHES):
        session.bindings.walks.may_search(TID)
    session.bindings.slots[TID].rebuild()
    data = session.snapshot(TID, REGS)
    settled = session.settle(data) if data is not None else session.capture(TID, REGS)
    assert settled.status is CaptureStatus.STALE and session.stats.not_its_own == 1


def _over_orphan(
    target: FakeTarget, names: list[str], native_id: int, running: bool = True
) -> tuple[CPythonSession, ThreadStateInfo]:
    """A session that maps no thread, and whose last walk left one orphan under REGS's pthread handle
    (``ThreadBindings.orphaned``): a thread state whose ``native_thread_id`` is ``native_id`` (3.11+),
    running ``names``, or with its chain emptied unless ``running``. Returns the session and that state."""
    info, _frames = chain(target, names)
    target.put(info.addr + target.layout.thread.native_thread_id, "Q", native_id)
    if not running:
        target.put(info.addr + target.layout.thread.frame, "Q", 0)
    session = session_over(target, info)
    orphan = ThreadStateInfo(info.addr, 0, REGS.fs_base, native_id, 0)
    session.bindings.slots, session.bindings.orphaned = {}, {REGS.fs_base: orphan}
    return session, info


@pytest.mark.parametrize("target", LAYOUTS[2:], indirect=True)
def test_an_exited_threads_orphaned_state_is_not_taken_by_the_next_thread_with_its_handle(target):
    """3.11+: a thread that exited between a walk and the listing of the live threads leaves its state an
    orphan (no live thread has its id), under a pthread handle glibc gives the next thread it starts. That
    thread's own state among the newest is read; with none yet, it stays unmapped rather than take the
    orphan, cleared (empty chain) or already another thread's. A thread state made before a fork, running a
    chain under its first id, is still taken over."""
    session, _cleared = _over_orphan(target, ["b", "a"], TID + 7, running=False)  # the exited thread's
    assert unmapped(session.capture(TID, REGS)) and session.stats.adopted == 0
    own, _frames = chain(target, ["d", "c"])
    session.bindings.threads = _listed(target, own, newer=0)
    stack = session.capture(TID, REGS)
    assert stack.status is CaptureStatus.OK and stack.tstate == own.addr and session.stats.adopted == 0

    session, reused = _over_orphan(target, ["f", "e"], TID + 8)  # freed, and another thread's state by the stop
    target.put(reused.addr + target.layout.thread.native_thread_id, "Q", TID + 9)
    assert unmapped(session.capture(TID, REGS)) and session.stats.adopted == 0

    session, _forked = _over_orphan(target, ["h", "g"], TID + 10)  # the parent's, run by the child's thread
    stack = session.capture(TID, REGS)
    assert stack.status is CaptureStatus.OK and len(stack.frames) == 2 and session.stats.adopted == 1


@pytest.mark.parametrize("target", LAYOUTS[2:], indirect=True)
def test_a_forked_childs_main_thread_idle_on_its_parents_state_is_not_called_unmapped(target):
    """A forked child's main thread between two calls into Python (a uWSGI worker waiting for a request)
    runs its parent's state with an empty chain: not taken over, and not counted toward the notice that
    the main thread matched no thread state, which calls it a bug of nprof's."""
    session, _idle = _over_orphan(target, ["b", "a"], TID + 7, running=False)
    for _ in range(3):
        assert unmapped(session.capture(TID, REGS))
    assert session.stats.unmapped == 3 and session.stats.main_unmapped == 0 and session.stats.adopted == 0


@pytest.mark.parametrize("target", LAYOUTS[2:], indirect=True)
def test_a_walk_that_finds_an_adopting_threads_own_state_maps_it_to_that(target):
    """A thread that took over an orphan (``ThreadBindings.adopt``) is mapped to its own state once a walk
    finds one under its id, though the orphan is still on the lists under its pthread handle."""
    t = target.layout.thread
    own, _frames = chain(target, ["b", "a"])
    [orphan] = _other_states(target, 1)  # an id no live thread has
    for tstate in (own.addr, orphan):
        target.put(tstate + t.thread_id, "Q", REGS.fs_base)
    runtime = target.alloc(2048)
    target.put(runtime + target.layout.runtime.interpreters_head, "Q", _linked(target, [own.addr, orphan]))
    session = session_over(target, own)
    session.bindings.interpreter = SimpleNamespace(runtime=runtime)
    session.bindings.ns_tids = {TID: TID}  # the live threads (as a pid namespace of the target's own lists them)
    session.bindings.adopted = {TID: REGS.fs_base}
    session.bindings.rescan(0.0)
    assert session.bindings.orphaned[REGS.fs_base].addr == orphan
    assert session.bindings.slots[TID].info.addr == own.addr and session.bindings.slots[TID].ident == TID


@pytest.mark.parametrize("target", LAYOUTS[2:], indirect=True)
def test_a_slot_taken_over_under_another_id_is_not_kept_for_the_threads_own_state_at_its_address(target):
    """Thread states are freed and allocated at the same few addresses. A slot made for a state under an
    orphan's id, whose address now holds the thread's own state, is replaced when that state is found:
    kept, it checked every capture against the orphan's id, and found the state stale each time."""
    own, _frames = chain(target, ["b", "a"])
    session = session_over(target, own)
    # adopted when the address held TID + 7's state
    session.bindings.slots = {TID: ThreadSlot(TID, own, TID + 7, target.readv)}
    session.bindings.threads = _listed(target, own, newer=0)
    stack = session.capture(TID, REGS)
    assert stack.status is CaptureStatus.OK and stack.tstate == own.addr and len(stack.frames) == 2, stack
    assert session.bindings.slots[TID].ident == TID


@pytest.mark.parametrize("target", LAYOUTS, indirect=True)
def test_a_thread_unmapped_before_the_interpreter_has_a_state_asks_for_every_walk(target):
    """While no walk has found a thread state (the interpreter still starting), each unmapped capture asks
    for a walk at once, and those walks do not use up the two a thread gets: the main thread's two were
    spent before its state existed, and its next 10-12 samples at 200 Hz had no Python frames."""
    info, _frames = chain(target, ["b", "a"])
    session = session_over(target, info)
    session.bindings.slots = {}
    for _ in range(4):
        session.bindings.walks.walked(0.0, complete=True, found_states=False)  # a walk that found nothing
        assert unmapped(session.capture(TID, REGS)) and session.bindings.walks.soon
