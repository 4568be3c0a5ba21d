"""Which native frame runs each group of runtime frames, told by stack addresses rather than by names.

An interpreter that keeps a record on the C stack of each of its eval-loop activations says, by that
record's address, which native frame is the activation: the one whose stack bytes hold it. CPython 3.12+
keeps the entry (shim) ``_PyInterpreterFrame`` of each activation there, 3.11 its ``_PyCFrame``
(``agents/cpython/marks.py``). A native frame ``i`` owns the stack bytes ``[sps[i], sps[i + 1])``: from its
own stack pointer up to its caller's, the CFA (``UnwoundStack.sps``).

Names cannot do this everywhere: a stripped interpreter whose eval-loop body gcc moved to
``_PyEval_EvalFrameDefault.cold`` names it only in a debug file, a tail-calling 3.14 runs its opcodes in
``_TAIL_CALL_*`` functions, and a name can be cached wrongly (``SampledProcess.flags`` before the runtime was found).
The address of an activation's record is right whatever the frame is called. ``place`` is pure: the
sampler calls it once per sample, and the positions it returns are part of the stack memo's key.
Why and what was measured: docs/decisions/python-anchoring.md.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

#: the group's activation is not known by address (no record: CPython 3.8-3.10, or one not copied)
UNKNOWN = -1
#: the record lies outward of every native frame unwound, whose walk ended early: the activation is one of
#: the native frames not unwound
BEYOND = -2
#: the record lies in no native frame of a walk that reached the outermost one, or inward of the innermost:
#: it is not where the runtime said, and the group cannot be placed by it
NOWHERE = -3


def place(sps: Sequence[int], n_frames: int, marks: Sequence[int], complete: bool) -> tuple[int, ...]:
    """For each group's record address in ``marks`` (0: none), the index of the native frame holding it,
    or ``UNKNOWN``, ``BEYOND``, ``NOWHERE``. ``sps``: the walk's stack pointers (at least ``n_frames``);
    ``complete``: the walk reached the outermost frame, which then owns everything above its stack
    pointer."""
    out = []
    last = n_frames - 1
    # the stack pointer of the iteration after the last frame, where the walk knew it: the last frame's end
    outer_end = sps[n_frames] if len(sps) > n_frames and sps[n_frames] > sps[last] else None
    for mark in marks:
        if not mark:
            out.append(UNKNOWN)
        elif n_frames <= 0:
            out.append(BEYOND)
        else:
            i = _frame_holding(sps, last, mark)
            if i is not None:
                out.append(i)
            elif mark < sps[last]:
                out.append(NOWHERE)  # below the stack pointer, or between two stacks
            elif complete or (outer_end is not None and mark < outer_end):
                out.append(last)
            else:
                out.append(BEYOND)
    return tuple(out)


def _frame_holding(sps: Sequence[int], last: int, addr: int) -> int | None:
    """The frame ``i < last`` with ``sps[i] <= addr < sps[i + 1]``; None if none. Stack pointers rise
    outward, so a bisection finds it; across a signal frame onto another stack they need not, and where
    the bisection lands on no such frame, the frames are searched one by one."""
    i = bisect_right(sps, addr, 0, last + 1) - 1
    if 0 <= i < last and sps[i] <= addr < sps[i + 1]:
        return i
    for i in range(last):
        if sps[i] <= addr < sps[i + 1]:
            return i
    return None
