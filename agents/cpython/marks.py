"""Where each eval-loop activation keeps its record on the C stack: the addresses that place a capture's
groups of Python frames among the native frames (``profiler/sampling/anchoring.py``).

3.12+: the group's entry (shim) frame, whose address the chain holds. 3.11: the ``_PyCFrame`` whose
``current_frame`` is in the group, read outward from ``tstate->cframe`` in the copied C stack (one outside
the copy ends the walk; walking outward, an outer record of a group replaces an inner leftover of an
activation still being entered). 3.8-3.10: none. Why: docs/decisions/python-anchoring.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.cpython.capture import MAX_CFRAME_GAP, MAX_FRAMES, StackCapture
from agents.cpython.layout import Layout
from profiler.model import RuntimeFrame
from profiler.unwind.stack import StackWindow


class ActivationMarks:
    """The records of one interpreter layout's activations, per capture."""

    def __init__(self, layout: Layout) -> None:
        t, f = layout.thread, layout.frame
        self.shims = f.shim_owners
        #: 3.11: the offsets of ``current_frame`` and ``previous`` in a ``_PyCFrame``; None on other versions
        self.cframe: tuple[int, int] | None = None
        if f.is_entry is not None and t.cframe_current_frame is not None and t.cframe_previous is not None:
            self.cframe = (t.cframe_current_frame, t.cframe_previous)

    @property
    def known(self) -> bool:
        """The layout keeps records (3.11+)."""
        return bool(self.shims) or self.cframe is not None

    def of(
        self, capture: StackCapture, frames: Sequence[RuntimeFrame], sources: Sequence[int], stack: StackWindow
    ) -> list[int]:
        """Per group of ``frames`` (as ``profiler.sampling.merge.group_runtime`` makes them, innermost
        first), the address of its activation's record, 0 where none is known. ``sources[k]`` is the index
        in ``capture.frames`` of ``frames[k]`` (frames past its end were added by the session: no record)."""
        if not self.known:
            return []
        raw = capture.frames
        groups: list[tuple[int, int]] = []  #: each group's (first, last) index in ``raw``; -1: none
        shim_after: list[int] = []  #: per group, the index in ``raw`` of the shim that ends it, or -1
        first = last = -1
        in_group = just_closed = False
        for k, frame in enumerate(frames):
            src = sources[k] if k < len(sources) else -1
            if frame.shim:
                if just_closed and src >= 0:
                    shim_after[-1] = src
                just_closed = False
                continue
            just_closed = False
            in_group = True
            if first < 0:
                first = src
            if src >= 0:
                last = src
            if frame.entry:
                groups.append((first, last))
                shim_after.append(-1)
                first = last = -1
                in_group, just_closed = False, True
        if in_group:  # frames below the last entry: the outermost activation's (``group_runtime``)
            groups.append((first, last))
            shim_after.append(-1)
        if self.cframe is None:  # 3.12+: a group's record is the shim after it
            return [raw[i][0] if i >= 0 else 0 for i in shim_after]
        return self._cframes(capture, raw, groups, stack)

    def _cframes(
        self,
        capture: StackCapture,
        raw: list[tuple[int, int, int, int]],
        groups: list[tuple[int, int]],
        stack: StackWindow,
    ) -> list[int]:
        """3.11: each group's ``_PyCFrame``, found by the frame its ``current_frame`` names."""
        marks = [0] * len(groups)
        if not capture.cframe or not groups:
            return marks
        group_of: dict[int, int] = {}  # frame address -> group, frames left out of ``frames`` included
        start = 0
        for g, (_first, last) in enumerate(groups):
            if last < 0:
                continue
            for i in range(start, last + 1):
                group_of[raw[i][0]] = g
            start = last + 1
        assert self.cframe is not None
        current_offset, previous_offset = self.cframe
        read = stack.read
        cframe = capture.cframe
        for _ in range(MAX_FRAMES):
            current, previous = read(cframe + current_offset), read(cframe + previous_offset)
            if current is None or previous is None:
                break  # not on the copied stack: the thread state's root_cframe, or beyond the copy
            held = group_of.get(current)
            if held is not None:
                marks[held] = cframe  # walking outward: an outer record of the same group replaces an inner one
            if not cframe < previous <= cframe + MAX_CFRAME_GAP or previous & 7:
                break
            cframe = previous
        return marks
