"""A walk that takes over its thread's previous walk's outer frames (``unwind/reuse.py``) gives exactly the
frames and stop reason a walk from scratch gives, whatever changed in between: over the fake process of
``test_cfi_unwind`` (CFI, frame-pointer and signal frames), case by case and over random changes.

Whether frames were taken over is seen from outside: taken-over frames are the previous walk's objects.

Also here: walks that read only the saved registers some rule uses give the frames of walks that read them
all (``registers_read.READ_FROM_START``), and a rule that uses one left out until then has the walk start over."""

from __future__ import annotations

import random

import pytest

from profiler.model import DW_RBP, DW_RBX, DW_RSP, StopReason, UnwoundStack
from profiler.unwind import policy, registers_read, reuse
from profiler.unwind.address_space import ModuleEntry
from profiler.unwind.policy import NativeUnwinder
from profiler.unwind.stack import StackWindow
from tests.support.cfi_builder import CfiBuilder, advance_loc, def_cfa, def_cfa_offset, offset
from tests.unit.test_cfi_unwind import GCC_CIE, STACK, FakeObject, FakeSpace, Stack, mixed_stack, registers

SPIN_PC = 0x1010  # in spin, a leaf called by c (mixed_stack)
SPIN_PC_2 = 0x1020


#: the key of the thread sampled, under which the unwinder keeps its last walk
THREAD = 1


def fresh(space: FakeSpace, regs: list[int | None], window: StackWindow, max_frames: int = 2048) -> UnwoundStack:
    return NativeUnwinder(space, max_frames).unwind(regs, window)  # type: ignore[arg-type]


def taken(out: UnwoundStack, before: UnwoundStack) -> int:
    """How many of ``out``'s frames are ``before``'s own objects (taken over, not walked)."""
    ids = {id(f) for f in before.frames}
    return sum(id(f) in ids for f in out.frames)


def same(a: UnwoundStack, b: UnwoundStack) -> bool:
    return list(a.frames) == list(b.frames) and a.stop == b.stop and a.other_sp == b.other_sp


def spin_regs(pc: int = SPIN_PC, rbx: int = 0xAAA) -> list[int | None]:
    return registers(rip=pc, rsp=STACK, rbp=STACK + 0x40, rbx=rbx)


def test_the_next_sample_takes_over_the_callers_of_the_leaf() -> None:
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    window = mixed_stack().window()
    first = unwinder.unwind(spin_regs(), window, THREAD)
    second = unwinder.unwind(spin_regs(SPIN_PC_2), mixed_stack().window(), THREAD)
    assert same(second, fresh(space, spin_regs(SPIN_PC_2), window))
    # spin is walked (its pc moved), c's frame is run again to find c's caller... and the rest taken over
    assert [f.rel for f in second.frames] == [SPIN_PC_2, 0x114F, 0x501F, 0x124F, 0x130F]
    assert taken(second, first) >= 2
    assert second.stop == StopReason.END_OF_STACK


def test_a_changed_saved_word_is_walked_again() -> None:
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    first = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    s = mixed_stack()
    s.put(STACK + 0x58, 0x1318)  # main's return address: elsewhere in _start
    second = unwinder.unwind(spin_regs(SPIN_PC_2), s.window(), THREAD)
    assert same(second, fresh(space, spin_regs(SPIN_PC_2), s.window()))
    assert second.frames[-1].rel == 0x1317
    assert second.frames[-1] is not first.frames[-1]


def test_a_changed_word_no_walk_reads_does_not_stop_the_take_over() -> None:
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    first = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    s = mixed_stack()
    s.put(STACK + 0x18, 0x12345678)  # a local of c: read by no step
    second = unwinder.unwind(spin_regs(SPIN_PC_2), s.window(), THREAD)
    assert same(second, fresh(space, spin_regs(SPIN_PC_2), s.window()))
    assert taken(second, first) >= 2


def test_a_register_no_rule_uses_differs_only_in_the_innermost_state() -> None:
    """rbx is live in spin (a loop counter, say), and spin's caller c holds the same value (spin saved
    nothing). The innermost states differ (spin's step could use any register): spin is walked again. c's
    state differs only in rbx, which no rule uses: c's frame on is taken over."""
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    first = unwinder.unwind(spin_regs(rbx=1), mixed_stack().window(), THREAD)
    second = unwinder.unwind(spin_regs(rbx=2), mixed_stack().window(), THREAD)
    assert same(second, fresh(space, spin_regs(rbx=2), mixed_stack().window()))
    assert second.frames[0] is not first.frames[0]
    assert second.frames[1] is first.frames[1]


def test_copies_that_start_or_end_elsewhere() -> None:
    """The same stack copied from a higher rsp (a shallower stop) and cut lower (a full window)."""
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    data = bytes(mixed_stack().data)
    c_regs = registers(rip=0x1150, rsp=STACK + 8, rbp=STACK + 0x40, rbx=0xAAA)  # stopped in c, after the call
    windows = [
        StackWindow(data, STACK, False),
        StackWindow(data[8:], STACK + 8, False),  # starts higher
        StackWindow(data[:0x58], STACK, True),  # ends lower: main's return address is past it
        StackWindow(data[8:0x60], STACK + 8, True),
        StackWindow(data, STACK, False),  # ends higher again
    ]
    for regs in (spin_regs(), c_regs):
        for window in windows:
            if window.base > regs[DW_RSP]:  # type: ignore[operator]
                continue
            assert same(unwinder.unwind(regs, window, THREAD), fresh(space, regs, window))


def test_a_read_of_the_maps_in_between_is_a_walk_from_scratch() -> None:
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    first = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    space.generation += 1
    second = unwinder.unwind(spin_regs(SPIN_PC_2), mixed_stack().window(), THREAD)
    assert taken(second, first) == 0
    third = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    assert taken(third, second) >= 2


def test_the_depth_limit_counts_taken_over_frames() -> None:
    """A first walk from c stops at the limit of 3 frames (c, jit, main); one from spin under it reaches
    the jit frame's state at depth 2, where taking over jit and main would make 4."""
    space = FakeSpace()
    unwinder = NativeUnwinder(space, max_frames=3)  # type: ignore[arg-type]
    c_regs = registers(rip=0x1150, rsp=STACK + 8, rbp=STACK + 0x40, rbx=0xAAA)
    first = unwinder.unwind(c_regs, mixed_stack().window(), THREAD)
    assert len(first.frames) == 3 and first.stop == StopReason.DEPTH_LIMIT
    out = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    assert same(out, fresh(space, spin_regs(), mixed_stack().window(), max_frames=3))
    assert len(out.frames) == 3 and out.stop == StopReason.DEPTH_LIMIT


def test_a_walk_stopped_by_the_end_of_the_copy_goes_on_in_a_longer_one() -> None:
    """The walk that ended at the copy's end is not taken over but run again: in a copy that ends higher
    (rsp rose, with a full window) it goes on."""
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    data = bytes(mixed_stack().data)
    first = unwinder.unwind(spin_regs(), StackWindow(data[:0x58], STACK, True), THREAD)
    assert first.stop == StopReason.WINDOW_EXHAUSTED and len(first.frames) == 4
    window = StackWindow(data[:0x80], STACK, True)
    second = unwinder.unwind(spin_regs(SPIN_PC_2), window, THREAD)
    assert same(second, fresh(space, spin_regs(SPIN_PC_2), window))
    assert second.stop == StopReason.END_OF_STACK and taken(second, first) >= 1


class RefreshingSpace(FakeSpace):
    """Reads its maps again when the unwinder first looks up the second pc in spin."""

    def find(self, avma, code=False):  # type: ignore[no-untyped-def]
        if avma == SPIN_PC_2:
            self.generation += 1
        return super().find(avma, code)


def test_a_read_of_the_maps_during_the_walk_ends_the_take_over() -> None:
    space = RefreshingSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    first = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    second = unwinder.unwind(spin_regs(SPIN_PC_2), mixed_stack().window(), THREAD)
    assert same(second, fresh(space, spin_regs(SPIN_PC_2), mixed_stack().window()))
    assert taken(second, first) == 0
    third = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    assert taken(third, second) == 0  # the walk made while the code mapped changed was not kept
    assert taken(unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD), third) >= 2


#: values the random changes write: return addresses into every function, stack addresses, junk
WORDS = [0, 1, 0x1150, 0x1158, 0x5020, 0x1250, 0x1310, 0x1318, 0x1410, 0xB0B, 0x9999,
         *(STACK + off for off in range(0, 0x80, 8))]  # fmt: skip
STARTS = [  # (rip, rsp, rbp): stops in spin, c, the jit code and main
    (SPIN_PC, STACK, STACK + 0x40), (SPIN_PC_2, STACK, STACK + 0x40), (0x1150, STACK + 8, STACK + 0x40),
    (0x5030, STACK + 0x38, STACK + 0x40), (0x1260, STACK + 0x50, 0),
]  # fmt: skip


@pytest.mark.parametrize("pausing", [False, True])
def test_random_changes_never_change_the_result(monkeypatch, pausing: bool) -> None:
    """2000 walks of one thread, each after a random change: a word of the stack rewritten, another stop,
    a copy cut elsewhere, the maps read again. Each equals a walk from scratch. Without pauses in the
    logging (``reuse.MISSES_BEFORE_PAUSE``) the take-over is tried, and happens, often."""
    if not pausing:
        monkeypatch.setattr(reuse, "MISSES_BEFORE_PAUSE", 1 << 30)
    rng = random.Random(1234)
    space = FakeSpace()
    unwinder = NativeUnwinder(space, max_frames=rng.choice([3, 5, 2048]))  # type: ignore[arg-type]
    stack = mixed_stack()
    start = STARTS[0]
    took = 0
    before: UnwoundStack | None = None
    for _ in range(2000):
        change = rng.random()
        if change < 0.5:
            stack.put(STACK + 8 * rng.randrange(0x80 // 8), rng.choice(WORDS))
        elif change < 0.55:
            stack = mixed_stack()
        elif change < 0.8:
            start = rng.choice(STARTS)
        elif change < 0.82:
            space.generation += 1
        rip, rsp, rbp = start
        regs = registers(rip=rip, rsp=rsp, rbp=rbp, rbx=rng.choice([0xAAA, 0xAAA, 0xB0B]))
        lo = rng.choice([0, 0, rsp - STACK])
        hi = rng.choice([len(stack.data), len(stack.data), 0x58, 0x60, 0x40])
        window = StackWindow(bytes(stack.data[lo:hi]), STACK + lo, hi < len(stack.data))
        out = unwinder.unwind(regs, window, THREAD)
        expect = fresh(space, regs, window, unwinder.max_frames)
        assert same(out, expect), (start, lo, hi)
        took += before is not None and taken(out, before) > 0
        before = out
    assert took > (100 if pausing else 200)


def test_a_window_not_aligned_to_words_is_walked_whole_and_not_kept() -> None:
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    first = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    second = unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD)
    assert taken(second, first) >= 2  # kept
    odd = StackWindow(bytes(4) + bytes(mixed_stack().data), STACK - 4, False)
    assert same(unwinder.unwind(spin_regs(), odd, THREAD), fresh(space, spin_regs(), odd))
    assert taken(unwinder.unwind(spin_regs(), mixed_stack().window(), THREAD), second) == 0  # nothing kept


def test_only_the_most_recently_walked_threads_keep_their_walk(monkeypatch) -> None:
    monkeypatch.setattr(policy, "MAX_LOGS", 2)
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    last = {}
    for thread in (0, 1, 0, 2):  # thread 1 is the least recently walked of three
        last[thread] = unwinder.unwind(spin_regs(), mixed_stack().window(), thread)
    for thread, kept in ((0, True), (2, True), (1, False)):
        out = unwinder.unwind(spin_regs(), mixed_stack().window(), thread)
        assert (taken(out, last[thread]) >= 2) is kept, thread


def test_leaving_out_unused_saved_registers_never_changes_the_result(monkeypatch) -> None:
    """Walks that read only the saved registers some rule uses (``registers_read.READ_FROM_START``, then what rules
    met add) give the frames of walks that read every saved register, over the random changes above."""
    rng = random.Random(99)
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    monkeypatch.setattr(registers_read, "READ_FROM_START", registers_read.ALL_REGISTERS)
    every = NativeUnwinder(space)  # type: ignore[arg-type]
    stack, start = mixed_stack(), STARTS[0]
    for _ in range(500):
        if rng.random() < 0.6:
            stack.put(STACK + 8 * rng.randrange(0x80 // 8), rng.choice(WORDS))
        else:
            start = rng.choice(STARTS)
        rip, rsp, rbp = start
        regs = registers(rip=rip, rsp=rsp, rbp=rbp, rbx=rng.choice([0xAAA, 0xB0B]))
        window = stack.window()
        assert same(unwinder.unwind(regs, window, THREAD), every.unwind(regs, window)), start


class SaverSpace(FakeSpace):
    """leaf (0x1000) <- saver (0x1100; push ``saved``: at cfa-16) <- 0x1200 with the CFI ``user`` (None: no
    CFI, so the jit code's frame pointers at 0x5000 serve) <- _start (0x1300)."""

    def __init__(self, saved: int, user: bytes | None) -> None:
        super().__init__()
        b = CfiBuilder()
        cie = b.cie(GCC_CIE)
        b.fde(cie, 0x1000, 0x40, b"")  # leaf
        b.fde(cie, 0x1100, 0x100, advance_loc(1) + def_cfa_offset(16) + offset(saved, 2))  # saver
        if user is not None:
            b.fde(cie, 0x1200, 0x100, user)
        b.fde(cie, 0x1300, 0x20, b"\x07\x10")  # _start: DW_CFA_undefined rip
        self.entries[0] = ModuleEntry(0x1000, 0x4000, self.modules[0], FakeObject(b.table(hdr_svma=0x800)))


def test_a_rule_based_on_a_register_left_out_until_then_has_the_walk_start_over() -> None:
    """The CFA of the function at 0x1200 is rbx + 16, as hand-written code may define it: found only from the
    rbx that saver saved."""
    s = Stack()
    s.put(STACK + 0x00, 0x1150)  # leaf's return address: into saver
    s.put(STACK + 0x08, STACK + 0x40)  # saver saved rbx (user's, its CFA - 16)
    s.put(STACK + 0x10, 0x1250)  # saver's return address: into user
    s.put(STACK + 0x48, 0x1310)  # user's return address (at rbx + 8): into _start
    unwinder = NativeUnwinder(SaverSpace(DW_RBX, def_cfa(DW_RBX, 16)))  # type: ignore[arg-type]
    regs = registers(rip=0x1010, rsp=STACK, rbx=0x1)
    for _ in range(2):  # the first walk starts over once rbx is found to be used; the second keeps it
        out = unwinder.unwind(regs, s.window(), THREAD)
        assert [f.rel for f in out.frames] == [0x1010, 0x114F, 0x124F, 0x130F]
        assert out.stop == StopReason.END_OF_STACK


def test_a_saved_rbp_is_read_for_the_frame_pointer_frames_above() -> None:
    """The jit frame's caller is found from the rbp that saver saved, which no CFI rule uses."""
    s = Stack()
    s.put(STACK + 0x00, 0x1150)  # leaf's return address: into saver
    s.put(STACK + 0x08, STACK + 0x40)  # saver saved rbp: the jit frame's
    s.put(STACK + 0x10, 0x5020)  # saver's return address: into the jit code
    s.put(STACK + 0x40, 0)  # jit frame: [rbp] = caller's rbp (the outermost)
    s.put(STACK + 0x48, 0x1310)  # jit frame: [rbp+8] = return address into _start
    unwinder = NativeUnwinder(SaverSpace(DW_RBP, None))  # type: ignore[arg-type]
    out = unwinder.unwind(registers(rip=0x1010, rsp=STACK, rbp=0x1), s.window(), THREAD)
    assert [f.rel for f in out.frames] == [0x1010, 0x114F, 0x501F, 0x130F]
    assert out.stop == StopReason.END_OF_STACK


def test_a_thread_whose_walks_take_nothing_over_pauses_its_logs(monkeypatch) -> None:
    """Walks of two stacks that differ in main's return address, in turn, take nothing over: after
    ``MISSES_BEFORE_PAUSE`` of them the next ``PAUSED_WALKS`` are made without a log, so even a walk of the
    stack walked just before takes nothing over; after them, logged walks take over again."""
    monkeypatch.setattr(reuse, "PAUSED_WALKS", 5)
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    other = mixed_stack()
    other.put(STACK + 0x58, 0x1318)  # main's return address: elsewhere in _start
    stacks = [mixed_stack().window(), other.window()]
    last = unwinder.unwind(spin_regs(), stacks[0], THREAD)
    for i in range(1, reuse.MISSES_BEFORE_PAUSE + 1):
        out = unwinder.unwind(spin_regs(), stacks[i % 2], THREAD)
        assert taken(out, last) == 0 and same(out, fresh(space, spin_regs(), stacks[i % 2]))
        last = out
    for _ in range(5):  # paused: the same stack again takes nothing over
        out = unwinder.unwind(spin_regs(), stacks[0], THREAD)
        assert taken(out, last) == 0 and same(out, fresh(space, spin_regs(), stacks[0]))
        last = out
    first = unwinder.unwind(spin_regs(), stacks[0], THREAD)  # logged again
    assert taken(unwinder.unwind(spin_regs(), stacks[0], THREAD), first) >= 2
