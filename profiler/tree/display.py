"""How a stack is shown: its frames' functions and the calls inlined at them, in order, without what the
frame filter hides (``StackDisplays``), for every distinct stack of a session that an exporter writes.

The per-frame work (names, the filter, the inlined calls) is done once per frame id, and the frame ids of
many stacks are read off the prefix tree a level at a time (``tree_levels``), so the cost per stack is a
list concatenation per frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from profiler.model import FrameInfo, FrameKind
from profiler.profile.session import Session
from profiler.tree.frame_identity import shown_frame


def frame_info(session: Session, fid: int) -> FrameInfo:
    """What frame ``fid`` is called (``#fid`` in a session not symbolized that far)."""
    info = session.frame_info
    return info[fid] if info is not None and fid < len(info) else FrameInfo(f"#{fid}")


#: distinct stacks whose frame ids ``StackDisplays.many`` reads from the tree at a time: bounds the arrays it
#: builds to ~chunk x depth entries (4,096 stacks at the unwinder's depth limit: a few tens of MB)
PATHS_CHUNK = 1 << 12


class StackDisplays:
    """What a person sees for the stacks of one session under one frame filter: each frame's function, then
    the calls inlined into it at that address, each its own frame; each left out where ``keep`` says so, an
    inlined call on its own (a call helper inlined into a C function is hidden with ``--hide-interpreter``
    just as its out-of-line copy is).

    One exception keeps the order true: the calls inlined into an eval loop (``do_call_core``,
    ``eval_frame_handle_pending``, ``call_function`` in CPython) run on behalf of the newest runtime frame
    that loop activation executes, so when runtime frames were interleaved at an interpreter frame, its
    inlined calls come after them, not between the loop and the Python functions it runs.

    With ``hide_startup`` (``--hide-interpreter``), the start-up code outward of a stack's first runtime
    frame is left out too, inlined calls and all (``FrameInfo.startup``: ``_start`` ... ``Py_BytesMain`` ...
    ``_PyEval_EvalFrameDefault`` before ``<module>``), but for the calls an eval loop right before that frame
    defers, which ran for the runtime frames. Only where the first frame that is not native is a runtime
    frame: a stack without one shows whole, and so does a stack whose runtime frames sit on an
    ``[unanchored]`` marker above the native ones. ``lines``: frames are shown per line sampled, or per
    function (``frame_identity.shown_frame``).

    Every frame shown has a *display id*: an index into ``infos`` (what it shows) and ``origin`` (the frame id
    it comes from); a frame's function and each call inlined at it have their own. The names, the filter and
    the inlined calls are looked up once per frame id, here, not once per frame of every stack: exporters
    expand every distinct stack, and a 4-minute recording of a C++ program taking random call paths had
    335,000, 28 frames deep on average, whose expansion frame by frame took 19 s of a 22 s report.
    """

    def __init__(
        self, session: Session, keep: Callable[[FrameInfo], bool], lines: bool = True, hide_startup: bool = False
    ) -> None:
        self.session = session
        self.lines = lines
        self.infos: list[FrameInfo] = []
        self.origin: list[int] = []
        kinds = session.frames.kinds()
        self._runtime: list[bool] = (kinds == FrameKind.RUNTIME).tolist()
        self._native: list[bool] = (kinds == FrameKind.NATIVE).tolist()
        self._own: list[tuple[int, ...]] = []  #: frame id -> its function's display id, if shown
        self._calls: list[tuple[int, ...]] = []  #: frame id -> display ids of the calls inlined at it, shown
        #: frame id -> an interpreter frame (``FrameInfo.interpreter``): one whose inlined calls it defers
        self.interpreter: list[bool] = []
        #: frame id -> hidden outward of its stack's first runtime frame (``hide_startup``)
        self.startup: list[bool] = []
        for fid in range(len(session.frames)):
            frame = frame_info(session, fid)
            self._own.append(self._shown(fid, [frame], keep))
            self._calls.append(self._shown(fid, session.inlined.get(fid, ()), keep))
            self.interpreter.append(frame.interpreter)
            self.startup.append(hide_startup and frame.startup)
        self._hides_startup = any(self.startup)

    def _shown(self, fid: int, frames: Sequence[FrameInfo], keep: Callable[[FrameInfo], bool]) -> tuple[int, ...]:
        ids = []
        for frame in frames:
            if keep(frame):
                ids.append(len(self.infos))
                self.infos.append(shown_frame(frame, self.lines))
                self.origin.append(fid)
        return tuple(ids)

    def own_count(self, fid: int) -> int:
        """How many display ids frame ``fid``'s function has (0: hidden, or 1), before its inlined calls'."""
        return len(self._own[fid])

    def startup_end(self, fids: Sequence[int]) -> int:
        """How many frames of the stack ``fids`` (outermost first) are outward of its first runtime frame, where
        start-up code is hidden: 0 where nothing is (no frame hidden as start-up, or the first frame that is not
        native is not a runtime frame)."""
        if not self._hides_startup:
            return 0
        native = self._native
        for i, fid in enumerate(fids):
            if not native[fid]:
                return i if self._runtime[fid] else 0
        return 0

    def of_frame(self, fid: int) -> tuple[int, ...]:
        """The display ids frame ``fid`` shows, wherever it is: its function's, then its inlined calls'
        (consecutive ids: they are given out frame id by frame id)."""
        return self._own[fid] + self._calls[fid]

    def calls_of(self, fid: int) -> tuple[int, ...]:
        """The display ids of the calls inlined at frame ``fid`` that are shown."""
        return self._calls[fid]

    def expand(self, fids: Sequence[int], whole: bool = True) -> list[int]:
        """The display ids of the stack of frame ids ``fids`` (outermost first), in the order shown; ``whole``:
        ``fids`` start at the stack's root (else no start-up code is hidden, which only the root says)."""
        hidden = self.startup_end(fids) if whole else 0
        if hidden:
            return self._expand_hiding(fids, hidden)
        runtime, own, calls, interpreter = self._runtime, self._own, self._calls, self.interpreter
        out: list[int] = []
        deferred: tuple[int, ...] = ()
        last = len(fids) - 1
        for i, fid in enumerate(fids):
            if deferred and not runtime[fid]:
                out += deferred
                deferred = ()
            out += own[fid]
            inlined = calls[fid]
            if inlined:
                if interpreter[fid] and i < last and runtime[fids[i + 1]]:
                    deferred = inlined
                else:
                    out += inlined
        out += deferred
        return out

    def _expand_hiding(self, fids: Sequence[int], hidden: int) -> list[int]:
        """``expand`` of a stack whose first ``hidden`` frames are outward of its first runtime frame, where the
        start-up frames show only the calls they defer to the runtime frames. ``expand``'s loop with one more
        test per frame, kept apart (docs/decisions/readable-frames.md)."""
        runtime, own, calls, interpreter = self._runtime, self._own, self._calls, self.interpreter
        startup = self.startup
        out: list[int] = []
        deferred: tuple[int, ...] = ()
        last = len(fids) - 1
        for i, fid in enumerate(fids):
            if deferred and not runtime[fid]:
                out += deferred
                deferred = ()
            inlined = calls[fid]
            defers = bool(inlined) and interpreter[fid] and i < last and runtime[fids[i + 1]]
            if i < hidden and startup[fid]:
                if defers:
                    deferred = inlined
                continue
            out += own[fid]
            if defers:
                deferred = inlined
            else:
                out += inlined
        out += deferred
        return out

    def pairs(self, fids: Sequence[int]) -> list[tuple[int, FrameInfo]]:
        """``expand`` as (frame id it came from, what it shows) pairs."""
        return [(self.origin[d], self.infos[d]) for d in self.expand(fids)]

    def many(self, sids: Sequence[int]) -> Iterator[list[int]]:
        """``expand`` of each stack id in ``sids``, in their order. Frame ids are read from the prefix tree
        for a chunk of stacks at a time, one level for all of them per step (walking each stack's nodes in
        Python took 4.5 s for the 335,000 stacks above)."""
        columns = self.session.stacks.columns()
        parent, frame = columns["parent"], columns["frame"]
        for lo in range(0, len(sids), PATHS_CHUNK):
            for path in stack_paths(np.asarray(sids[lo : lo + PATHS_CHUNK], dtype=np.int64), parent, frame):
                yield self.expand(path)


def tree_levels(
    sids: np.ndarray, parent: np.ndarray, frame: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The prefix tree read for many stacks at once, one level per step from the leaves towards the roots:
    per step, the index into ``sids`` of each stack still that deep, and the frame id of its node there."""
    index, node = np.arange(len(sids), dtype=np.int64), sids
    while len(node):
        yield index, frame[node]
        node = parent[node]
        up = node >= 0
        index, node = index[up], node[up]


def stack_paths(sids: np.ndarray, parent: np.ndarray, frame: np.ndarray) -> list[list[int]]:
    """The frame ids of each stack of ``sids``, outermost first, from the prefix tree's columns."""
    levels = list(tree_levels(sids, parent, frame))
    if not levels:
        return [[] for _ in range(len(sids))]
    # outermost level first, then a stable sort by stack: each stack's frames end up together, root first
    stacks = np.concatenate([index for index, _fids in reversed(levels)])
    fids = np.concatenate([fids for _index, fids in reversed(levels)])
    flat = fids[np.argsort(stacks, kind="stable")].tolist()
    ends = np.cumsum(np.bincount(stacks, minlength=len(sids))).tolist()
    return [flat[b:e] for b, e in zip([0] + ends[:-1], ends)]
