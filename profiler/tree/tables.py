"""Interned frames and stacks in numpy columns.

Every distinct frame gets an id once; every distinct stack is a node of a prefix tree (parent stack id,
frame id), so a stack that shares its first 30 frames with another costs one node, and a sample is just a
stack id. Memory grows with the number of *distinct* frames and stacks, never with the number of samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profiler.model import FrameKind

#: a frame's identity: (kind, module or agent index, address or code key, offset)
FrameKey = tuple[int, int, int, int]


class _Columns:
    """Growable numpy columns with amortised O(1) append (capacity doubling)."""

    def __init__(self, dtypes: dict[str, str], capacity: int = 1024) -> None:
        self._dtypes = dtypes
        self._cols = {name: np.zeros(capacity, dtype=dt) for name, dt in dtypes.items()}
        self.size = 0

    def append(self, *values: int) -> int:
        i = self.size
        if i == len(next(iter(self._cols.values()))):
            for name, col in self._cols.items():
                grown = np.zeros(len(col) * 2, dtype=col.dtype)
                grown[:i] = col
                self._cols[name] = grown
        for col, value in zip(self._cols.values(), values):
            col[i] = value
        self.size = i + 1
        return i

    def column(self, name: str) -> np.ndarray:
        return self._cols[name][: self.size]

    def load(self, columns: dict[str, np.ndarray]) -> None:
        n = len(next(iter(columns.values())))
        for name, dt in self._dtypes.items():
            col = np.zeros(max(n, 16), dtype=dt)
            col[:n] = columns[name]
            self._cols[name] = col
        self.size = n


class FrameTable:
    """frame id -> (kind, module, address, offset)."""

    def __init__(self) -> None:
        self._ids: dict[FrameKey, int] = {}
        self._cols = _Columns({"kind": "u1", "module": "i4", "address": "u8", "offset": "i8"})

    def __len__(self) -> int:
        return self._cols.size

    def intern(self, key: FrameKey) -> int:
        fid = self._ids.get(key)
        if fid is None:
            fid = self._cols.append(*key)
            self._ids[key] = fid
        return fid

    def key(self, fid: int) -> FrameKey:
        c = self._cols
        return (
            int(c.column("kind")[fid]),
            int(c.column("module")[fid]),
            int(c.column("address")[fid]),
            int(c.column("offset")[fid]),
        )

    def columns(self) -> dict[str, np.ndarray]:
        return {name: self._cols.column(name) for name in ("kind", "module", "address", "offset")}

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray]) -> FrameTable:
        table = cls()
        table._cols.load(columns)
        for fid, key in enumerate(
            zip(
                columns["kind"].tolist(),
                columns["module"].tolist(),
                columns["address"].tolist(),
                columns["offset"].tolist(),
            )
        ):
            table._ids[key] = fid
        return table

    def kinds(self) -> np.ndarray:
        return self._cols.column("kind")

    def native_ids(self) -> np.ndarray:
        return np.nonzero(self.kinds() == FrameKind.NATIVE)[0]


class StackTable:
    """The prefix tree: stack id -> (parent stack id or -1, frame id). Stacks are read root first."""

    def __init__(self) -> None:
        #: (parent, frame) -> stack id, for interning; built on first use for a loaded table: a report only
        #: reads the tree, and this dict (~180 bytes a node) made loading a session of 7 million nodes take
        #: 5 s and 1.2 GB before anything was rendered
        self._index: dict[tuple[int, int], int] | None = {}
        self._cols = _Columns({"parent": "i4", "frame": "i4"})

    def __len__(self) -> int:
        return self._cols.size

    def intern(self, frame_ids: Sequence[int]) -> int:
        """Id of the stack whose frames, outermost first, are ``frame_ids``; -1 for the empty stack."""
        sid = -1
        ids = self._index
        if ids is None:
            cols = self.columns()
            ids = self._index = {key: i for i, key in enumerate(zip(cols["parent"].tolist(), cols["frame"].tolist()))}
        for fid in frame_ids:
            node = ids.get((sid, fid))
            if node is None:
                node = self._cols.append(sid, fid)
                ids[(sid, fid)] = node
            sid = node
        return sid

    def frames(self, sid: int) -> list[int]:
        """Frame ids of stack ``sid``, outermost first."""
        parent = self._cols.column("parent")
        frame = self._cols.column("frame")
        out = []
        while sid >= 0:
            out.append(int(frame[sid]))
            sid = int(parent[sid])
        out.reverse()
        return out

    def columns(self) -> dict[str, np.ndarray]:
        return {"parent": self._cols.column("parent"), "frame": self._cols.column("frame")}

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray]) -> StackTable:
        table = cls()
        table._cols.load(columns)
        table._index = None
        return table
