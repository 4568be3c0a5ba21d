"""A memo whose keys hold frames, bounded by the frames they hold rather than by its entries.

Two memos of the recording path are keyed by whole stacks: the stack memo of each process (a walk's
native and runtime frames -> the stack interned for them, ``stacks.py``) and the session's interning cache
(frame keys -> stack id, ``session.py``). An entry costs what its stack's frames cost, 80-150 bytes each,
and stacks run from a few frames to hundreds: a bound on entries bounds nothing (a memo of 16,384 deep
random-graph stacks held ~130 MB). When the frames held pass the bound, the memo starts over.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class FrameMemo(Generic[V]):
    """``get`` is the dict's own (no Python call on the hot path); ``put`` counts the frames an entry
    holds and empties the memo first when they pass ``max_frames``."""

    def __init__(self, max_frames: int) -> None:
        self.max_frames = max_frames
        self._entries: dict[Hashable, V] = {}
        self._frames = 0
        self.get = self._entries.get

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: Hashable, value: V, frames: int) -> None:
        if self._frames >= self.max_frames:
            self._entries.clear()
            self._frames = 0
        self._entries[key] = value
        self._frames += frames
