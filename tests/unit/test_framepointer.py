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
