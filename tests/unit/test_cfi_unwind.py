"""Unwinding over a fake stack: CFI frames mixed with frame-pointer frames, a signal frame, and every
stop reason (issue 3). The stack is bytes built here; the modules are ``UnwindTable``s built from
hand-assembled CFI, so nothing runs and nothing is read from a process.

Code layout of the fake process (svma = avma: bias 0)::

    module 0 "app" (CFI)  0x1000 spin      leaf, CFA = rsp+8
                          0x1100 c         push rbx; sub $32,rsp: CFA = rsp+48, rbx at cfa-16
                          0x1200 main      push rbp: CFA = rsp+16, rbp at cfa-16
                          0x1300 _start    DW_CFA_undefined rip
                          0x1400 broken    CFA = rsp+0 (a corrupt rule that never moves the stack)
                          0x1500 vfork     pop rdi: CFA = rsp+0, return address in rdi (glibc's vfork)
                          0x304f __restore_rt (CIE "zRS": glibc's signal trampoline at 0x3050)
    module 1 "jit"  (no CFI, frame pointers) 0x5000-0x6000
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from profiler.binary.callsite import MAX_CALL_LENGTH, CallBefore, call_before
from profiler.binary.cfi import UnwindRule, UnwindTable
from profiler.binary.prologue import FrameState
from profiler.model import (
    DW_RA,
    DW_RBP,
    DW_RBX,
    DW_RDI,
    DW_RSP,
    NUM_DWARF_REGS,
    Module,
    NativeFrame,
    StopReason,
)
from profiler.unwind.address_space import ModuleEntry
from profiler.unwind.cfi import step_cfi
from profiler.unwind.policy import NativeUnwinder
from profiler.unwind.stack import StackWindow
from tests.support.cfi_builder import (
    CfiBuilder,
    advance_loc,
    breg,
    def_cfa,
    def_cfa_expression,
    def_cfa_offset,
    expression,
    offset,
    register,
)

GCC_CIE = def_cfa(DW_RSP, 8) + offset(DW_RA, 1)
STACK = 0x7FF000

# glibc's __restore_rt FDE (sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c, offsets from ucontext_i.sym;
# as readelf --debug-dump=frames shows them for this machine's libc): register -> offset from the
# trampoline's rsp of its slot in the kernel's ucontext_t (uc_mcontext.gregs)
SIGCONTEXT = {8: 40, 9: 48, 10: 56, 11: 64, 12: 72, 13: 80, 14: 88, 15: 96, 5: 104, 4: 112, 6: 120,
              3: 128, 1: 136, 0: 144, 2: 152, 7: 160, 16: 168}  # fmt: skip


def app_table() -> UnwindTable:
    b = CfiBuilder()
    cie = b.cie(GCC_CIE)
    b.fde(cie, 0x1000, 0x40, b"")  # spin
    b.fde(cie, 0x1100, 0x100, advance_loc(1) + def_cfa_offset(16) + offset(DW_RBX, 2)
          + advance_loc(4) + def_cfa_offset(48))  # fmt: skip
    b.fde(cie, 0x1200, 0x100, advance_loc(1) + def_cfa_offset(16) + offset(DW_RBP, 2))
    b.fde(cie, 0x1300, 0x20, b"\x07\x10")  # DW_CFA_undefined rip
    b.fde(cie, 0x1400, 0x20, def_cfa(DW_RSP, 0) + offset(DW_RA, 0))  # broken: CFA = rsp, ra at [rsp]
    b.fde(cie, 0x1500, 0x20, advance_loc(1) + def_cfa_offset(0) + register(DW_RA, DW_RDI))  # vfork
    signal = b"".join(expression(0x10, reg, breg(DW_RSP, off)) for reg, off in SIGCONTEXT.items())
    cfa = def_cfa_expression(breg(DW_RSP, 160) + b"\x06")  # DW_OP_breg7 160; DW_OP_deref
    b.fde(b.cie(b"", augmentation=b"zRS"), 0x304F, 0x10, cfa + signal)
    return b.table(hdr_svma=0x800)


@dataclass
class FakeObject:
    table: UnwindTable | None
    symbols: FakeSymbols | None = None
    code: dict[int, bytes] = field(default_factory=dict)  #: svma -> the instruction bytes placed there

    def call_before(self, svma: int) -> CallBefore:
        image = bytearray(MAX_CALL_LENGTH)  # the bytes before svma; zeros where no code was placed
        for at, data in self.code.items():
            for i, byte in enumerate(data):
                if svma - MAX_CALL_LENGTH <= at + i < svma:
                    image[at + i - svma + MAX_CALL_LENGTH] = byte
        return call_before(bytes(image), svma)

    def in_plt(self, svma: int) -> bool:
        return False

    def unwind_rule(self, svma: int) -> UnwindRule | None:
        return self.table.rule_for(svma) if self.table is not None else None

    def frame_state(self, svma: int) -> FrameState | None:
        return None

    def function_start(self, svma: int) -> int | None:
        return self.table.fde_start(svma) if self.table is not None else None


@dataclass
class FakeSymbols:
    functions: list[tuple[str, int, int]]  #: (name, start, end)

    def lookup(self, svma: int) -> tuple[str, int, int] | None:
        return next((f for f in self.functions if f[1] <= svma < f[2]), None)


class FakeSpace:
    """The two modules above, the way ``AddressSpace`` presents them to the unwinder."""

    def __init__(self) -> None:
        app = Module(0, "app", None, 0x1000, 0x4000, 0)
        jit = Module(1, "jit", None, 0x5000, 0x6000, 0, file_backed=False)
        self.modules = [app, jit]
        self.generation = 0  #: AddressSpace.generation: the maps never change here
        self.entries = [ModuleEntry(0x1000, 0x4000, app, FakeObject(app_table())),  # type: ignore[arg-type]
                        ModuleEntry(0x5000, 0x6000, jit, FakeObject(None))]  # type: ignore[arg-type]  # fmt: skip
        self.code: dict[int, bool] = {}  #: avma looked up -> whether the unwinder said it is code

    def find(self, avma: int, code: bool = False) -> ModuleEntry | None:
        self.code[avma] = code
        return next((e for e in self.entries if e.start <= avma < e.end), None)


class Stack:
    """Words placed at absolute addresses from STACK upwards."""

    def __init__(self, size: int = 0x400) -> None:
        self.data = bytearray(size)

    def put(self, addr: int, value: int) -> None:
        struct.pack_into("<Q", self.data, addr - STACK, value)

    def window(self, full: bool = False, size: int | None = None) -> StackWindow:
        return StackWindow(bytes(self.data[: size or len(self.data)]), STACK, full)


def registers(rip: int, rsp: int, rbp: int = 0, rbx: int = 0) -> list[int | None]:
    regs: list[int | None] = [0] * NUM_DWARF_REGS
    regs[DW_RA], regs[DW_RSP], regs[DW_RBP], regs[DW_RBX] = rip, rsp, rbp, rbx
    return regs


def mixed_stack() -> Stack:
    """spin <- c <- jit (frame pointer) <- main <- _start."""
    s = Stack()
    s.put(STACK + 0x00, 0x1150)  # spin's return address: into c
    s.put(STACK + 0x28, 0xB0B)  # c saved rbx at cfa-16 (CFA = STACK + 0x38)
    s.put(STACK + 0x30, 0x5020)  # c's return address: into the jit code
    s.put(STACK + 0x40, STACK + 0x50)  # jit frame: [rbp] = caller's rbp
    s.put(STACK + 0x48, 0x1250)  # jit frame: [rbp+8] = return address into main
    s.put(STACK + 0x50, 0)  # main saved rbp (0: the outermost frame pointer)
    s.put(STACK + 0x58, 0x1310)  # main's return address: into _start
    return s


def described(frames: list[NativeFrame]) -> list[tuple[int, int, str]]:
    return [(f.module, f.rel, f.method.name) for f in frames]


def test_cfi_frames_mixed_with_frame_pointer_frames() -> None:
    space = FakeSpace()
    unwinder = NativeUnwinder(space)  # type: ignore[arg-type]
    regs = registers(rip=0x1010, rsp=STACK, rbp=STACK + 0x40, rbx=0xAAA)
    out = unwinder.unwind(regs, mixed_stack().window())
    assert described(out.frames) == [
        (0, 0x1010, "IP"),  # spin: the pc itself
        (0, 0x114F, "CFI"),  # c: return address - 1
        (1, 0x501F, "CFI"),  # jit code, found through c's CFI
        (0, 0x124F, "FRAME_POINTER"),  # main, found through the jit frame's rbp chain
        (0, 0x130F, "CFI"),  # _start
    ]
    assert out.stop == StopReason.END_OF_STACK
    assert [f.avma for f in out.frames] == [0x1010, 0x1150, 0x5020, 0x1250, 0x1310]
    # only the pc from the rbp chain may be data: a miss on any other reads the maps again at once
    assert space.code == {0x1010: True, 0x114F: True, 0x501F: True, 0x124F: False, 0x130F: True}


def test_callee_saved_registers_are_restored_and_caller_saved_forgotten() -> None:
    rule = app_table().rule_for(0x114F)
    assert rule is not None
    regs = registers(rip=0x1150, rsp=STACK + 0x08, rbp=STACK + 0x40, rbx=0xAAA)
    caller = step_cfi(rule, regs, mixed_stack().window())
    assert isinstance(caller, list)
    assert caller[DW_RSP] == STACK + 0x38  # the CFA
    assert caller[DW_RA] == 0x5020
    assert caller[DW_RBX] == 0xB0B  # restored from cfa-16
    assert caller[DW_RBP] == STACK + 0x40  # same value: c never touched it
    assert caller[0] is None  # rax: caller-saved, unknown in the caller


def test_window_exhausted_keeps_the_frames_so_far() -> None:
    space = FakeSpace()
    regs = registers(rip=0x1010, rsp=STACK, rbp=STACK + 0x40)
    out = NativeUnwinder(space).unwind(regs, mixed_stack().window(full=True, size=0x30))  # type: ignore[arg-type]
    assert [f.rel for f in out.frames] == [0x1010, 0x114F]
    assert out.stop == StopReason.WINDOW_EXHAUSTED


def test_unreadable_word_below_a_partial_window_is_a_bad_frame() -> None:
    regs = registers(rip=0x1010, rsp=STACK + 0x1000)  # rsp outside the copy, which is not full
    out = NativeUnwinder(FakeSpace()).unwind(regs, mixed_stack().window())  # type: ignore[arg-type]
    assert out.stop == StopReason.BAD_FRAME and len(out.frames) == 1


def test_return_address_outside_every_module() -> None:
    s = Stack()
    s.put(STACK, 0x9999)
    out = NativeUnwinder(FakeSpace()).unwind(registers(rip=0x1010, rsp=STACK), s.window())  # type: ignore[arg-type]
    assert out.stop == StopReason.PC_OUTSIDE_MODULE and len(out.frames) == 1


def test_a_frame_that_does_not_move_the_stack_pointer_stops_the_walk() -> None:
    s = Stack()
    s.put(STACK, 0x1410)  # "broken" returns to itself with the same rsp: would loop forever
    out = NativeUnwinder(FakeSpace()).unwind(registers(rip=0x1408, rsp=STACK), s.window())  # type: ignore[arg-type]
    assert out.stop == StopReason.NO_PROGRESS and len(out.frames) == 1


def test_a_return_address_held_in_a_register_is_a_frame_that_does_not_move_the_stack_pointer() -> None:
    """glibc's vfork pops its return address into rdi around the system call, in which the parent waits
    for its child's exec: CFA = rsp there, and the walk goes on into the caller (main), as gdb's does."""
    s = Stack()
    s.put(STACK + 0x00, 0)  # main saved rbp
    s.put(STACK + 0x08, 0x1310)  # main's return address: into _start
    regs = registers(rip=0x1508, rsp=STACK)
    regs[DW_RDI] = 0x1250  # vfork's return address: into main, after its push rbp
    out = NativeUnwinder(FakeSpace()).unwind(regs, s.window())  # type: ignore[arg-type]
    assert [f.rel for f in out.frames] == [0x1508, 0x1250 - 1, 0x1310 - 1] and out.stop == StopReason.END_OF_STACK


def test_a_frame_pointer_below_the_stack_pointer_is_no_unwind_info() -> None:
    s = mixed_stack()
    regs = registers(rip=0x5010, rsp=STACK + 0x38, rbp=STACK + 0x10)  # jit code, rbp below rsp
    out = NativeUnwinder(FakeSpace()).unwind(regs, s.window())  # type: ignore[arg-type]
    assert out.stop == StopReason.NO_UNWIND_INFO and len(out.frames) == 1


def test_no_cfi_and_no_frame_pointer_is_no_unwind_info() -> None:
    s = Stack()
    regs = registers(rip=0x5010, rsp=STACK, rbp=0x1234)  # jit code with a junk rbp
    out = NativeUnwinder(FakeSpace()).unwind(regs, s.window())  # type: ignore[arg-type]
    assert out.stop == StopReason.NO_UNWIND_INFO


def test_depth_limit() -> None:
    regs = registers(rip=0x1010, rsp=STACK, rbp=STACK + 0x40)
    out = NativeUnwinder(FakeSpace(), max_frames=3).unwind(regs, mixed_stack().window())  # type: ignore[arg-type]
    assert len(out.frames) == 3 and out.stop == StopReason.DEPTH_LIMIT


def test_signal_frame_continues_into_the_interrupted_function() -> None:
    """handler -> __restore_rt -> c (interrupted at its first instruction) -> main -> _start.

    The interrupted pc 0x1100 is the first byte of c: looked up as pc - 1 it would fall in the gap
    before c, so the frame below a signal frame must be looked up at its pc exactly.
    """
    s = Stack()
    s.put(STACK, 0x3050)  # the handler (a leaf, CFA = rsp+8) returns into __restore_rt
    uc = STACK + 8  # the trampoline's rsp: the kernel's rt_sigframe/ucontext
    interrupted_rsp = STACK + 0x200
    for reg, off in SIGCONTEXT.items():
        s.put(uc + off, 0x1000 + reg)
    s.put(uc + SIGCONTEXT[DW_RSP], interrupted_rsp)
    s.put(uc + SIGCONTEXT[DW_RA], 0x1100)  # interrupted at c's first instruction
    s.put(uc + SIGCONTEXT[DW_RBP], 0xFEED)
    s.put(interrupted_rsp, 0x1250)  # c had pushed nothing yet: [rsp] is its return address into main
    s.put(interrupted_rsp + 8, 0)  # main's saved rbp
    s.put(interrupted_rsp + 16, 0x1310)  # main's return address
    regs = registers(rip=0x1008, rsp=STACK)
    space = FakeSpace()
    out = NativeUnwinder(space).unwind(regs, s.window())  # type: ignore[arg-type]
    assert described(out.frames) == [
        (0, 0x1008, "IP"),
        (0, 0x3050, "CFI"),  # __restore_rt, named at its return address, not the byte before
        (0, 0x1100, "SIGNAL"),  # the interrupted pc, exact
        (0, 0x124F, "CFI"),
        (0, 0x130F, "CFI"),
    ]
    assert out.stop == StopReason.END_OF_STACK


def test_signal_frame_restores_every_register() -> None:
    s = Stack()
    for reg, off in SIGCONTEXT.items():
        s.put(STACK + off, 0x1000 + reg)
    rule = app_table().rule_for(0x304F)
    assert rule is not None and rule.signal
    caller = step_cfi(rule, registers(rip=0x3050, rsp=STACK), s.window())
    assert caller == [0x1000 + reg for reg in range(NUM_DWARF_REGS)]


# x86-64 calls (Intel SDM vol. 2, CALL): FF /2 through a register, and E8 with a 32-bit displacement
CALL_RAX = bytes.fromhex("ffd0")


def call_rel32(at: int, target: int) -> bytes:
    """``call target`` placed at ``at``: E8 and the displacement from the next instruction."""
    return b"\xe8" + struct.pack("<i", target - (at + 5))


def scanning_space(code: dict[int, bytes]) -> FakeSpace:
    """The app module with code bytes placed, and a symbol for the function at 0x2000 (no CFI, no analysis)."""
    space = FakeSpace()
    app = space.entries[0]
    obj = FakeObject(app_table(), FakeSymbols([("kernel", 0x2000, 0x2100), ("other", 0x3000, 0x3040)]), code)
    space.entries[0] = ModuleEntry(app.start, app.end, app.module, obj)  # type: ignore[arg-type]
    return space


def test_a_frame_nothing_else_steps_is_found_by_a_scan() -> None:
    """JIT code with a junk rbp: the first word above rsp that follows a call is its return address; data
    words (a stack address, a number) are passed over."""
    s = Stack()
    s.put(STACK + 0x00, STACK + 0x80)  # a stack address
    s.put(STACK + 0x08, 0x1234)  # in the app, but after no call
    s.put(STACK + 0x10, 0x1310)  # after `call *%rax`, into _start (whose CFI ends the walk)
    space = scanning_space({0x1310 - 2: CALL_RAX})
    regs = registers(rip=0x5010, rsp=STACK, rbp=0x1234)
    out = NativeUnwinder(space).unwind(regs, s.window())  # type: ignore[arg-type]
    assert described(out.frames) == [(1, 0x5010, "IP"), (0, 0x130F, "SCAN")]
    assert out.stop == StopReason.END_OF_STACK


def test_a_scan_passes_over_a_stale_return_address_from_a_call_to_another_function() -> None:
    """A return address an earlier call left on the stack follows a real call, but one to "other", not to
    the function being stepped ("kernel", entered by a direct call from _start's code)."""
    s = Stack()
    s.put(STACK + 0x00, 0x1158)  # stale: after `call other`
    s.put(STACK + 0x18, 0x1310)  # after `call kernel`
    space = scanning_space({0x1153: call_rel32(0x1153, 0x3000), 0x130B: call_rel32(0x130B, 0x2000)})
    regs = registers(rip=0x2010, rsp=STACK, rbp=0x1234)
    out = NativeUnwinder(space).unwind(regs, s.window())  # type: ignore[arg-type]
    assert described(out.frames) == [(0, 0x2010, "IP"), (0, 0x130F, "SCAN")]


def test_a_frame_pointer_chain_that_leads_out_of_the_code_is_scanned_instead() -> None:
    """rbp held data that passes the chain's checks (aligned, above rsp, in the copy): the return address it
    gives is in no module, so the frame is found by a scan rather than ending the walk there."""
    s = Stack()
    s.put(STACK + 0x08, 0x1310)  # after `call kernel`
    s.put(STACK + 0x40, STACK + 0x80)  # [rbp]
    s.put(STACK + 0x48, 0x9999)  # [rbp + 8]: no code
    space = scanning_space({0x1310 - 5: call_rel32(0x1310 - 5, 0x2000)})
    regs = registers(rip=0x2010, rsp=STACK, rbp=STACK + 0x40)
    out = NativeUnwinder(space).unwind(regs, s.window())  # type: ignore[arg-type]
    assert described(out.frames) == [(0, 0x2010, "IP"), (0, 0x130F, "SCAN")]


def test_a_scan_that_finds_nothing_is_no_unwind_info() -> None:
    s = Stack()
    s.put(STACK + 0x00, 0x1310)  # code, but after no call
    regs = registers(rip=0x2010, rsp=STACK, rbp=0x1234)
    out = NativeUnwinder(scanning_space({})).unwind(regs, s.window())  # type: ignore[arg-type]
    assert out.stop == StopReason.NO_UNWIND_INFO and len(out.frames) == 1


def test_a_scan_of_a_function_with_no_known_start_passes_over_calls_into_other_modules() -> None:
    """A function with no symbol and no CFI (a stripped Rust extension): which function a direct call
    entered is not known, but a ``call rel32`` cannot leave its module, so a stale return address after a
    call to code of another mapping is not its caller (a sweep: libc's calloc was shown calling orjson)."""
    s = Stack()
    s.put(STACK + 0x00, 0x1158)  # stale: after `call 0x5800`, code of the jit mapping
    s.put(STACK + 0x18, 0x1310)  # after `call 0x2180`, in the app's code like the function stepped
    space = scanning_space({0x1153: call_rel32(0x1153, 0x5800), 0x130B: call_rel32(0x130B, 0x2180)})
    regs = registers(rip=0x2190, rsp=STACK, rbp=0x1234)  # no symbol covers 0x2190
    out = NativeUnwinder(space).unwind(regs, s.window())  # type: ignore[arg-type]
    assert described(out.frames) == [(0, 0x2190, "IP"), (0, 0x130F, "SCAN")]
