"""Frame-pointer unwinding and prologue analysis, over stacks and code built in the test."""

from __future__ import annotations

import struct

import pytest

from profiler.binary.prologue import FRAME_SET, FrameState, FunctionLayout
from profiler.model import StopReason
from profiler.unwind.framepointer import step_chain, step_first
from profiler.unwind.stack import StackWindow

BASE = 0x7FFF_0000_0000


def window(words: dict[int, int], size: int = 0x400, full: bool = False) -> StackWindow:
    data = bytearray(size)
    for offset, value in words.items():
        struct.pack_into("<Q", data, offset, value)
    return StackWindow(bytes(data), BASE, full)


def test_chain_step_reads_saved_rbp_and_return_address():
    w = window({0x40: BASE + 0x80, 0x48: 0x401234})
    assert step_chain(BASE + 0x40, BASE, w) == (0x401234, BASE + 0x50, BASE + 0x80)


@pytest.mark.parametrize(
    "rbp, reason",
    [
        (0, StopReason.END_OF_STACK),  # _start clears rbp
        (BASE + 0x41, StopReason.BAD_FRAME),  # misaligned
        (BASE - 0x40, StopReason.BAD_FRAME),  # below the stack pointer
        (BASE + 0x1000, StopReason.BAD_FRAME),  # above the copied stack, which ended at its mapping
    ],
)
def test_chain_step_validates(rbp, reason):
    assert step_chain(rbp, BASE, window({})) is reason


def test_frame_above_a_full_window_is_window_exhausted():
    assert step_chain(BASE + 0x1000, BASE, window({}, full=True)) is StopReason.WINDOW_EXHAUSTED


def test_zero_return_address_ends_the_stack():
    assert step_chain(BASE + 0x40, BASE, window({0x40: BASE + 0x80, 0x48: 0})) is StopReason.END_OF_STACK


def test_first_frame_before_push_rbp_uses_rsp():
    w = window({0x0: 0x401111})
    assert step_first(FrameState(0, None), BASE, 0xAAAA, w) == (0x401111, BASE + 8, 0xAAAA)


def test_first_frame_after_push_rbp():
    w = window({0x0: BASE + 0x100, 0x8: 0x402222})  # [rsp] = saved rbp, [rsp+8] = return address
    assert step_first(FrameState(8, 0), BASE, 0xBBBB, w) == (0x402222, BASE + 16, BASE + 0x100)


def test_first_frame_with_frame_set_walks_rbp():
    w = window({0x40: BASE + 0x80, 0x48: 0x403333})
    assert step_first(FrameState(FRAME_SET), BASE, BASE + 0x40, w)[0] == 0x403333


# x86-64 machine code, assembled by hand (Intel SDM opcodes)
ENDBR64 = bytes.fromhex("f30f1efa")
PUSH_RBP = bytes.fromhex("55")
MOV_RBP_RSP = bytes.fromhex("4889e5")
PUSH_RBX = bytes.fromhex("53")
SUB_RSP_0x20 = bytes.fromhex("4883ec20")
NOP = bytes.fromhex("90")
CALL_REL = bytes.fromhex("e800000000")
LEAVE = bytes.fromhex("c9")
# OpenBLAS's kernel prologue (kernel/x86_64 PROLOGUE, then the realignment of the gemm kernels)
SUB_RSP_0x60 = bytes.fromhex("4883ec60")
MOV_STORE_RBX = bytes.fromhex("48891c24")  # mov %rbx,(%rsp)
MOV_STORE_RBP_8 = bytes.fromhex("48896c2408")  # mov %rbp,0x8(%rsp)
MOV_RBX_RSP = bytes.fromhex("4889e3")  # mov %rsp,%rbx
SUB_RSP_0x2000 = bytes.fromhex("4881ec00200000")
AND_RSP_4096 = bytes.fromhex("4881e400f0ffff")  # and $-4096,%rsp
MOV_RSP_RBX = bytes.fromhex("4889dc")  # mov %rbx,%rsp
MOV_EBX_1 = bytes.fromhex("bb01000000")  # mov $1,%ebx
LEA_RSP_RBP_0x28 = bytes.fromhex("488d65d8")  # lea -0x28(%rbp),%rsp
JNZ_BACK = bytes.fromhex("75fe")
POP_RBP = bytes.fromhex("5d")
RET = bytes.fromhex("c3")


def addresses(start: int, *parts: bytes) -> list[int]:
    out, at = [], start
    for p in parts:
        out.append(at)
        at += len(p)
    return out


def test_layout_of_a_frame_pointer_function():
    parts = [ENDBR64, PUSH_RBP, MOV_RBP_RSP, PUSH_RBX, SUB_RSP_0x20, CALL_REL, NOP, LEAVE, RET, NOP, CALL_REL]
    at = addresses(0x1000, *parts)
    layout = FunctionLayout(b"".join(parts), 0x1000)
    assert layout.state_at(at[0]) == FrameState(0, None)  # entry: return address at [rsp]
    assert layout.state_at(at[1]) == FrameState(0, None)  # at push rbp
    assert layout.state_at(at[2]) == FrameState(8, 0)  # pushed rbp, frame not set
    assert layout.state_at(at[3]).ra_offset == FRAME_SET
    assert layout.state_at(at[5]).ra_offset == FRAME_SET
    assert layout.state_at(at[8]) == FrameState(0, None)  # at ret, after leave
    assert layout.state_at(at[9]).ra_offset == FRAME_SET  # code after the ret runs in the body state


def test_layout_of_a_frameless_leaf():
    # a leaf that never touches rbp but pushes rbx and reserves stack
    parts = [PUSH_RBX, SUB_RSP_0x20, NOP, NOP, RET]
    at = addresses(0x2000, *parts)
    layout = FunctionLayout(b"".join(parts), 0x2000)
    assert layout.state_at(at[0]) == FrameState(0, None)
    assert layout.state_at(at[2]) == FrameState(8 + 0x20, None)
    assert layout.state_at(at[4]) == FrameState(0, None)


def test_layout_of_a_kernel_that_realigns_its_stack():
    """After `and rsp, -4096` the return address is found from the copy of rsp kept in rbx (DWARF 3), and
    the caller's rbp from the store that saved it; back from the copy, from rsp again."""
    parts = [SUB_RSP_0x60, MOV_STORE_RBX, MOV_STORE_RBP_8, MOV_RBX_RSP, SUB_RSP_0x2000, AND_RSP_4096, JNZ_BACK,
             NOP, MOV_RSP_RBX, NOP, RET]  # fmt: skip
    at = addresses(0x3000, *parts)
    layout = FunctionLayout(b"".join(parts), 0x3000)
    assert layout.state_at(at[1]) == FrameState(0x60, None)
    assert layout.state_at(at[3]) == FrameState(0x60, 8)  # rbp stored at rsp + 8
    assert layout.state_at(at[5]) == FrameState(0x2060, 0x2008)  # before the `and`: rsp still known
    assert layout.state_at(at[6]) == FrameState(0x60, 8, 3)  # realigned: from rbx
    assert layout.state_at(at[7]) == FrameState(0x60, 8, 3)  # the body
    assert layout.state_at(at[9]) == FrameState(0x60, 8)  # rsp restored from rbx
    assert layout.state_at(at[10]) == FrameState(0, None)


@pytest.mark.parametrize(
    "parts",
    [
        [SUB_RSP_0x60, AND_RSP_4096, NOP],  # no copy of rsp kept
        [MOV_RBX_RSP, AND_RSP_4096, MOV_EBX_1, NOP],  # the copy overwritten (a write to ebx clears rbx)
    ],
)
def test_layout_after_an_untracked_realignment_is_unknown(parts):
    """Where nothing says how far rsp moved, the state is unknown (None: the rbp chain, as for a function
    without analysis), not the offset from before the `and`."""
    at = addresses(0x4000, *parts)
    assert FunctionLayout(b"".join(parts), 0x4000).state_at(at[-1]) is None


def test_layout_of_an_epilogue_from_rbp():
    """gcc's `lea rsp, [rbp - n]` before popping the registers it saved puts rsp back at a known place."""
    parts = [PUSH_RBP, MOV_RBP_RSP, PUSH_RBX, SUB_RSP_0x20, AND_RSP_4096, LEA_RSP_RBP_0x28, POP_RBP, NOP]
    at = addresses(0x5000, *parts)
    layout = FunctionLayout(b"".join(parts), 0x5000)
    assert layout.state_at(at[5]).ra_offset == FRAME_SET
    assert layout.state_at(at[7]) == FrameState(0x28, None)  # rsp = rbp - 0x28 = entry - 0x30; one pop


def test_first_frame_from_a_copy_of_rsp():
    """``step_first`` reads from the value of the state's base register, which the policy passes as sp."""
    w = window({0x100: BASE + 0x300, 0x158: 0x404444})
    expected = (0x404444, BASE + 0x160, BASE + 0x300)
    assert step_first(FrameState(0x58, 0, 3), BASE + 0x100, BASE + 0x40, w) == expected


def test_a_block_after_a_jump_takes_the_state_of_the_branches_to_it():
    """A function that tests its argument before its prologue (gcc's shrink-wrapping), with a loop entered
    from below: the loop head follows padding after a `jmp`, reached only by the later `jne`. In the body
    state (the state at the first branch, here the entry's) it read the return address at [rsp]."""
    code = bytes.fromhex("4885ff" "7415" "53" "4883ec20" "eb04" "90" "48ffcf" "4885ff" "75f8" "4883c420" "5b" "c3")
    layout = FunctionLayout(code, 0x6000)
    assert layout.state_at(0x6003) == FrameState(0, None)  # je out, before the prologue
    assert layout.state_at(0x600D) == FrameState(0x28, None)  # the loop head: from the jne below
    assert layout.state_at(0x6010) == FrameState(0x28, None)  # the condition: from the jmp above
    assert layout.state_at(0x601A) == FrameState(0, None)  # ret


def test_rbp_set_from_rsp_below_its_saved_value_is_a_copy_not_a_frame():
    """`mov rbp, rsp` after more than `push rbp` (glibc's sigwait keeps a pointer to its locals so): rbp
    does not point at the caller's rbp, and the rbp chain from it read a local as a return address."""
    parts = [PUSH_RBP, PUSH_RBX, SUB_RSP_0x20, MOV_RBP_RSP, AND_RSP_4096, NOP]
    at = addresses(0x7000, *parts)
    layout = FunctionLayout(b"".join(parts), 0x7000)
    assert layout.state_at(at[4]) == FrameState(0x30, 0x28)  # not FRAME_SET
    assert layout.state_at(at[5]) == FrameState(0x30, 0x28, 6)  # realigned: from the copy in rbp
