"""``StackDisplays.expand``'s hiding of start-up code (``--hide-interpreter``) for many stacks at once, over the
levels of the prefix tree that ``totals.py`` reads: which of each node's display ids a stack shows.

A node is start-up code hidden on a stack if its frame is flagged (``StackDisplays.startup``), it is outward
of the stack's first frame that is not native, and that frame is a runtime frame. Whether it is depends on
the stack, not only on the node: the same ``Py_BytesMain`` node shows on a stack that never reached Python
code (start-up or shut-down) and is hidden on one that did. Levels come leaf first, so a node's position
from the root is its stack's depth minus its level.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profiler.model import FrameKind
from profiler.tree.display import StackDisplays

#: a position past every stack's end: "no frame that is not native"
_NONE = np.iinfo(np.int64).max


class StartupMask:
    """Per frame id, what ``skips`` needs to know of it, taken once from a ``StackDisplays``."""

    def __init__(self, displays: StackDisplays, count: np.ndarray) -> None:
        """``count``: per frame id, how many display ids it has (its function's and its inlined calls')."""
        frames = len(displays.session.frames)
        kinds = displays.session.frames.kinds()
        self.native = kinds == FrameKind.NATIVE
        self.runtime = kinds == FrameKind.RUNTIME
        self.startup = np.array(displays.startup, dtype=np.bool_).reshape(frames)
        self.any = bool(self.startup.any())  #: else ``skips`` has nothing to skip (and its columns are empty)
        self.count = count
        #: the display ids a hidden eval loop keeps: its inlined calls, which it defers to the runtime frames
        #: after it (``StackDisplays.expand``), so all but its own function's
        own = [displays.own_count(fid) for fid in range(frames)] if self.any else []
        self.own = np.array(own, dtype=np.int64)
        self.defers = np.array(displays.interpreter if self.any else [], dtype=np.bool_)

    def skips(self, levels: Sequence[tuple[np.ndarray, np.ndarray]], stacks: int) -> list[np.ndarray]:
        """Per level (as ``tree_levels`` gives them, for ``stacks`` stacks), per node: how many of its display
        ids, from the first, its stack does not show."""
        depth = np.zeros(stacks, dtype=np.int64)
        for index, _fids in levels:
            depth[index] += 1
        positions = [depth[index] - 1 - level for level, (index, _fids) in enumerate(levels)]
        first = np.full(stacks, _NONE, dtype=np.int64)  # per stack, the position of its first frame not native
        for (index, fids), pos in zip(levels, positions):
            other = ~self.native[fids]
            np.minimum.at(first, index[other], pos[other])
        qualifies = np.zeros(stacks, dtype=np.bool_)  # ... and it is a runtime frame
        for (index, fids), pos in zip(levels, positions):
            at = pos == first[index]
            qualifies[index[at]] = self.runtime[fids[at]]
        out = []
        for (index, fids), pos in zip(levels, positions):
            hidden = self.startup[fids] & qualifies[index] & (pos < first[index])
            keeps_calls = hidden & self.defers[fids] & (pos == first[index] - 1)
            out.append(np.where(hidden, np.where(keeps_calls, self.own[fids], self.count[fids]), 0))
        return out
