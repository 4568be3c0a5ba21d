"""Interned frames and stacks in numpy columns.

Every distinct frame gets an id once; every distinct stack is a node of a prefix tree (parent stack id,
frame id), so a stack that shares its first 30 frames with another costs one node, and a sample is just a
stack id. Memory grows with the number of *distinct* frames and stacks, never with the number of samples.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from profiler.model import FrameKind

#: a frame's identity: (kind, module or agent index, address or code key, offset)
FrameKey = tuple[int, int, int, int]
#: ``StackTable``'s child column: a node without children, and one whose children are in its dict
NO_CHILD = -1
MANY_CHILDREN = -2


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
    """The prefix tree: stack id -> (parent stack id or -1, frame id). Stacks are read root first.

    Interning walks the tree from the root, one child lookup per frame. The lookup is kept as small as a
    node: most nodes of a profile's tree have one child (the frames of a call chain below the point where
    it leaves every other stack), so each node notes its only child in a column, and only the children of
    a node with two or more, and of the root, are found through a dict. A dict keyed by (parent, frame)
    for every node held ~180 bytes a node (the tuple, its ints and the entry), where the columns hold 12:
    recording a program that calls through a random graph of 50 functions at 1 kHz for 60 s (2.2 million
    nodes), nprof's memory rose to 423 MiB with the dict and 158 MiB without (``benchmarks/bench_memory.py``).
    """

    def __init__(self) -> None:
        #: the columns: arrays that grow by ``intern``, or a loaded table's numpy columns until its first
        #: ``intern`` (a report only reads the tree: it needs neither a second copy nor the index)
        self._parent: array[int] | np.ndarray = array("i")
        self._frame: array[int] | np.ndarray = array("i")
        #: per node: its only child, ``NO_CHILD``, or ``MANY_CHILDREN`` (then its children are in
        #: ``_children``). None for a loaded table until its first ``intern``
        self._child: array[int] | None = array("i")
        self._roots: dict[int, int] = {}  #: frame id -> the node of the one-frame stack
        self._children: dict[int, int] = {}  #: ``node << 32 | frame`` -> child, for nodes of many children

    def __len__(self) -> int:
        return len(self._parent)

    def intern(self, frame_ids: Sequence[int]) -> int:
        """Id of the stack whose frames, outermost first, are ``frame_ids``; -1 for the empty stack."""
        child = self._child
        if child is None:
            child = self._child = self._index()
        frame, children = self._frame, self._children
        sid = -1
        for fid in frame_ids:
            if sid < 0:
                node = self._roots.get(fid)
                if node is None:
                    node = self._roots[fid] = self._add(-1, fid)
            else:
                only = child[sid]
                if only >= 0 and frame[only] == fid:
                    node = only
                elif only == MANY_CHILDREN:
                    node = children.get(sid << 32 | fid)
                    if node is None:
                        node = children[sid << 32 | fid] = self._add(sid, fid)
                elif only == NO_CHILD:
                    node = child[sid] = self._add(sid, fid)
                else:  # a second child: the node's children move to the dict
                    children[sid << 32 | frame[only]] = only
                    child[sid] = MANY_CHILDREN
                    node = children[sid << 32 | fid] = self._add(sid, fid)
            sid = node
        return sid

    def _add(self, parent: int, fid: int) -> int:
        node = len(self._parent)
        # (arrays by now: ``intern`` made them of a loaded table's columns, ``_index``)
        self._parent.append(parent)  # type: ignore[union-attr]
        self._frame.append(fid)  # type: ignore[union-attr]
        self._child.append(NO_CHILD)  # type: ignore[union-attr]
        return node

    def _index(self) -> array[int]:
        """The child column and the dicts of a loaded table, from its columns, which become arrays."""
        parent, frame = self._parent, self._frame
        assert isinstance(parent, np.ndarray) and isinstance(frame, np.ndarray)
        self._parent, self._frame = array("i", parent.tobytes()), array("i", frame.tobytes())
        nodes = np.arange(len(parent), dtype=np.int32)
        inner = parent >= 0
        counts = np.bincount(parent[inner], minlength=len(parent))
        child = np.full(len(parent), NO_CHILD, dtype=np.int32)
        only = inner.copy()
        only[inner] = counts[parent[inner]] == 1
        child[parent[only]] = nodes[only]
        child[counts >= 2] = MANY_CHILDREN
        many = inner & ~only
        keys = (parent[many].astype(np.int64) << 32) | frame[many]
        self._children = dict(zip(keys.tolist(), nodes[many].tolist()))
        self._roots = dict(zip(frame[~inner].tolist(), nodes[~inner].tolist()))
        return array("i", child.tobytes())

    def frames(self, sid: int) -> list[int]:
        """Frame ids of stack ``sid``, outermost first."""
        parent, frame = self._parent, self._frame
        out = []
        while sid >= 0:
            out.append(int(frame[sid]))
            sid = int(parent[sid])
        out.reverse()
        return out

    def columns(self) -> dict[str, np.ndarray]:
        """The tree as numpy columns (copies, but for a loaded table not interned into: a view would keep
        the arrays from growing)."""
        if isinstance(self._parent, np.ndarray):
            return {"parent": self._parent, "frame": self._frame}  # type: ignore[dict-item]
        return {
            "parent": np.frombuffer(self._parent, dtype=np.int32).copy(),
            "frame": np.frombuffer(self._frame, dtype=np.int32).copy(),
        }

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray]) -> StackTable:
        table = cls()
        table._parent = np.ascontiguousarray(columns["parent"], dtype=np.int32)
        table._frame = np.ascontiguousarray(columns["frame"], dtype=np.int32)
        table._child = None
        return table
