"""The handler-entry check and the read of the interrupted context (``unwind/sigframe.py``) on hand-built
frames; the real kernel's frame is checked in tests/integration/test_tracer.py."""

from __future__ import annotations

import signal
import struct

from profiler.model import DW_RA, DW_RBP, DW_RDI, DW_RSP, NUM_DWARF_REGS
from profiler.unwind.sigframe import (
    INFO_OFFSET,
    MCONTEXT_OFFSET,
    SIGCONTEXT_REGS,
    UC_OFFSET,
    interrupted_registers,
)
from profiler.unwind.stack import StackWindow

FRAME = 0x7FFF_0000_1000  #: the handler's rsp: the frame's first word
RESTORER = 0x7F00_0000_2050
#: the interrupted registers, DWARF number -> value
SAVED = {reg: 0x1000 + reg for reg in range(NUM_DWARF_REGS)} | {DW_RSP: FRAME + 0x800, DW_RA: 0x5555_0000_1234}


def frame_window(size: int = 0x1000) -> StackWindow:
    """A copy of ``size`` bytes from the frame up (cut there, as a copy ending at its mapping's end)."""
    data = bytearray(0x1000)
    struct.pack_into("<Q", data, 0, RESTORER)
    for i, reg in enumerate(SIGCONTEXT_REGS):
        struct.pack_into("<Q", data, MCONTEXT_OFFSET + 8 * i, SAVED[reg])
    return StackWindow(bytes(data[:size]), FRAME, False)


def entry_registers(sig: int = signal.SIGALRM) -> list[int]:
    regs = [0xDEAD] * NUM_DWARF_REGS
    regs[0] = 0  # rax
    regs[1] = FRAME + UC_OFFSET  # rdx
    regs[4] = FRAME + INFO_OFFSET  # rsi
    regs[DW_RDI] = sig
    regs[DW_RSP] = FRAME
    regs[DW_RA] = 0x5555_0000_0380  # the handler
    return regs


def test_the_interrupted_context_is_read_from_the_frame():
    interrupted = interrupted_registers(entry_registers(), frame_window(), signal.SIGALRM)
    assert interrupted == [SAVED[reg] for reg in range(NUM_DWARF_REGS)]
    assert interrupted[DW_RBP] == SAVED[DW_RBP]


def test_registers_that_are_not_a_handler_s_entry_are_left_alone():
    window = frame_window()
    assert interrupted_registers(entry_registers(), window, signal.SIGUSR1) is None  # another signal's
    moved = entry_registers()
    moved[DW_RSP] -= 8  # the handler pushed something: past its first instruction
    assert interrupted_registers(moved, window, signal.SIGALRM) is None
    used = entry_registers()
    used[0] = 1  # rax written
    assert interrupted_registers(used, window, signal.SIGALRM) is None


def test_a_frame_cut_by_the_copy_gives_nothing():
    short = frame_window(MCONTEXT_OFFSET + 8 * 4)
    assert interrupted_registers(entry_registers(), short, signal.SIGALRM) is None
