"""The per-frame unwinding policy: which method produces each frame, and when a walk stops.

For every frame the module holding pc is looked up once (memoized per pc). The innermost frame is unwound
with prologue analysis, callers through the rbp chain. Each frame records the method that produced it and
each walk records why it stopped, so a truncated stack explains itself.
"""

from __future__ import annotations

from profiler.binary.prologue import FRAME_SET, FrameState
from profiler.model import (
    DW_RA,
    DW_RBP,
    DW_RSP,
    NativeFrame,
    StopReason,
    UnwindMethod,
    UnwoundStack,
)
from profiler.unwind.address_space import AddressSpace, ModuleEntry
from profiler.unwind.framepointer import step_chain, step_first
from profiler.unwind.stack import StackWindow


class NativeUnwinder:
    """Unwinds snapshots of one process."""

    def __init__(self, space: AddressSpace, max_frames: int = 2048) -> None:
        self.space = space
        self.max_frames = max_frames

    def unwind(self, regs: list[int | None], window: StackWindow) -> UnwoundStack:
        frames: list[NativeFrame] = []
        pc = regs[DW_RA] or 0
        sp = regs[DW_RSP] or 0
        bp = regs[DW_RBP] or 0
        find = self.space.find
        entry = find(pc)
        if entry is None:
            frames.append(NativeFrame(-1, pc, pc, UnwindMethod.IP))
        else:
            frames.append(NativeFrame(entry.module.id, pc - entry.bias, pc, UnwindMethod.IP))
        state = self._frame_state(entry, pc)
        step = step_first(state, sp, bp, window)
        method = UnwindMethod.FRAME_POINTER
        if state is not None and state.ra_offset != FRAME_SET:
            method = UnwindMethod.PROLOGUE
        max_frames = self.max_frames
        while True:
            if isinstance(step, StopReason):
                return UnwoundStack(frames, step)
            ra, next_sp, next_bp = step
            if next_sp <= sp:
                return UnwoundStack(frames, StopReason.NO_PROGRESS)
            lookup = ra - 1
            entry = find(lookup)
            if entry is None:
                return UnwoundStack(frames, StopReason.PC_OUTSIDE_MODULE)
            if len(frames) >= max_frames:
                return UnwoundStack(frames, StopReason.DEPTH_LIMIT)
            frames.append(NativeFrame(entry.module.id, lookup - entry.bias, ra, method))
            method = UnwindMethod.FRAME_POINTER
            sp, bp = next_sp, next_bp
            step = step_chain(bp, sp, window)

    @staticmethod
    def _frame_state(entry: ModuleEntry | None, pc: int) -> FrameState | None:
        if entry is None or entry.obj is None:
            return None
        return entry.obj.frame_state(pc - entry.bias)
