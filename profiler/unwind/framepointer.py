"""Frame-pointer unwinding on x86-64 (System V psABI, "The Stack Frame"): each frame that keeps a frame
pointer stores the caller's rbp at ``[rbp]`` and the return address at ``[rbp + 8]``.

The innermost frame is special: the function may not have pushed rbp yet (it is at its first
instructions, or is a leaf that never sets up a frame). ``binary.prologue`` tells where the return address
is then, and ``step_first`` uses it; without that, a plain rbp walk skips the leaf's caller.
"""

from __future__ import annotations

from profiler.binary.prologue import FRAME_SET, FrameState
from profiler.model import StopReason
from profiler.unwind.stack import StackWindow

#: (return address, caller's rsp, caller's rbp) or the reason the walk cannot go on
StepResult = tuple[int, int, int] | StopReason


def step_chain(rbp: int, sp: int, window: StackWindow) -> StepResult:
    """Unwind one frame through ``rbp``. ``sp`` is the current frame's stack pointer."""
    if rbp == 0:
        return StopReason.END_OF_STACK
    if rbp & 7 or rbp < sp:
        return StopReason.BAD_FRAME
    saved_rbp = window.read(rbp)
    ra = window.read(rbp + 8)
    if saved_rbp is None or ra is None:
        return StopReason.WINDOW_EXHAUSTED if window.full and rbp >= window.end else StopReason.BAD_FRAME
    if ra == 0:
        return StopReason.END_OF_STACK
    return ra, rbp + 16, saved_rbp


def step_first(state: FrameState | None, sp: int, rbp: int, window: StackWindow) -> StepResult:
    """Unwind the innermost frame using the prologue analysis of its function (None: unknown function).
    ``sp`` is rsp, or the value of the register ``state.base`` names (a copy of rsp kept before the
    function realigned its stack)."""
    if state is None or state.ra_offset == FRAME_SET:
        return step_chain(rbp, sp, window)
    ra = window.read(sp + state.ra_offset)
    if ra is None:
        return StopReason.WINDOW_EXHAUSTED if window.full else StopReason.BAD_FRAME
    if ra == 0:
        return StopReason.END_OF_STACK
    caller_rbp = rbp
    if state.rbp_offset is not None:
        saved = window.read(sp + state.rbp_offset)
        if saved is None:
            return StopReason.BAD_FRAME
        caller_rbp = saved
    return ra, sp + state.ra_offset + 8, caller_rbp
