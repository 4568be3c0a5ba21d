"""Views over a session's samples: which samples count, the stacks they hold, and per-function totals.

Everything here works per *distinct* (thread, stack) pair, never per sample, so its cost is bounded by the
number of distinct stacks whatever the recording's length.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from profiler.config import ExportConfig
from profiler.model import FrameInfo, FrameKind, SampleClass
from profiler.sampling.session import Session


def included(cls: int, config: ExportConfig) -> bool:
    """Whether a sample of class ``cls`` is shown under ``config``."""
    if config.gil_only:
        return cls == SampleClass.GIL_HELD
    return config.idle or not SampleClass(cls).is_idle


def stack_counts(session: Session, config: ExportConfig) -> dict[int, dict[int, int]]:
    """thread index -> {stack id: samples}, for the samples ``config`` shows."""
    out: dict[int, dict[int, int]] = defaultdict(dict)
    shown = {int(cls) for cls in SampleClass if included(cls, config)}  # (not an enum lookup per sample)
    for (thread, stack, _stop, cls), n in session.samples.items():
        if stack < 0 or cls not in shown:
            continue
        per = out[thread]
        per[stack] = per.get(stack, 0) + n
    return dict(out)


def frame_filter(config: ExportConfig) -> Callable[[FrameInfo], bool]:
    """Predicate on frames, out-of-line or inlined: False for those ``config`` hides."""
    if not config.hide_interpreter:
        return lambda frame: True
    return lambda frame: not frame.interpreter


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

    Every frame shown has a *display id*: an index into ``infos`` (what it shows) and ``origin`` (the frame id
    it comes from); a frame's function and each call inlined at it have their own. The names, the filter and
    the inlined calls are looked up once per frame id, here, not once per frame of every stack: exporters
    expand every distinct stack, and a 4-minute recording of a C++ program taking random call paths had
    335,000, 28 frames deep on average, whose expansion frame by frame took 19 s of a 22 s report.
    """

    def __init__(self, session: Session, keep: Callable[[FrameInfo], bool]) -> None:
        self.session = session
        self.infos: list[FrameInfo] = []
        self.origin: list[int] = []
        self._runtime: list[bool] = (session.frames.kinds() == FrameKind.RUNTIME).tolist()
        self._own: list[tuple[int, ...]] = []  #: frame id -> its function's display id, if shown
        self._calls: list[tuple[int, ...]] = []  #: frame id -> display ids of the calls inlined at it, shown
        self._interpreter: list[bool] = []
        for fid in range(len(session.frames)):
            frame = frame_info(session, fid)
            self._own.append(self._shown(fid, [frame], keep))
            self._calls.append(self._shown(fid, session.inlined.get(fid, ()), keep))
            self._interpreter.append(frame.interpreter)

    def _shown(self, fid: int, frames: Sequence[FrameInfo], keep: Callable[[FrameInfo], bool]) -> tuple[int, ...]:
        ids = []
        for frame in frames:
            if keep(frame):
                ids.append(len(self.infos))
                self.infos.append(frame)
                self.origin.append(fid)
        return tuple(ids)

    def of_frame(self, fid: int) -> tuple[int, ...]:
        """The display ids frame ``fid`` shows, wherever it is: its function's, then its inlined calls'."""
        return self._own[fid] + self._calls[fid]

    def expand(self, fids: Sequence[int]) -> list[int]:
        """The display ids of the stack of frame ids ``fids`` (outermost first), in the order shown."""
        runtime, own, calls, interpreter = self._runtime, self._own, self._calls, self._interpreter
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


def stack_paths(sids: np.ndarray, parent: np.ndarray, frame: np.ndarray) -> list[list[int]]:
    """The frame ids of each stack of ``sids``, outermost first, from the prefix tree's columns."""
    index, node = np.arange(len(sids), dtype=np.int64), sids
    levels: list[tuple[np.ndarray, np.ndarray]] = []  # (stack index, frame id), leaves first
    while len(node):
        levels.append((index, frame[node]))
        node = parent[node]
        up = node >= 0
        index, node = index[up], node[up]
    if not levels:
        return [[] for _ in range(len(sids))]
    # outermost level first, then a stable sort by stack: each stack's frames end up together, root first
    stacks = np.concatenate([lv[0] for lv in reversed(levels)])
    fids = np.concatenate([lv[1] for lv in reversed(levels)])
    order = np.argsort(stacks, kind="stable")
    flat = fids[order].tolist()
    ends = np.cumsum(np.bincount(stacks, minlength=len(sids))).tolist()
    return [flat[b:e] for b, e in zip([0] + ends[:-1], ends)]


#: the longest command shown in a process's label: enough for what tells multiprocessing's processes apart,
#: which comes last ("/root/.pyenv/versions/3.12.1/bin/python -B -c from multiprocessing.spawn import
#: spawn_main; spawn_main(tracker_fd=8, pipe_handle=10) --multiprocessing-fork", 155 characters; at 60,
#: every worker, the resource tracker and the forkserver were all ".../bin/python -B -c from multip...")
LABEL_COMMAND_WIDTH = 160


def process_labels(session: Session) -> dict[int, str]:
    """pid -> ``pid N [command]`` for a session of several processes (``--subprocesses``), the command cut to
    ``LABEL_COMMAND_WIDTH`` characters; empty for a session of one, whose every profile is that process's."""
    pids = {t.pid for t in session.threads}
    if len(pids) <= 1:
        return {}
    return {pid: f"pid {pid} [{command_line(session.meta.processes.get(pid, []), LABEL_COMMAND_WIDTH)}]"
            for pid in pids}  # fmt: skip


def command_line(argv: Sequence[str], width: int | None = None) -> str:
    """``argv`` as one line, of at most ``width`` characters if given: runs of whitespace (the newlines of a
    ``python -c`` program) become one space, and a cut ends in "..."."""
    text = " ".join(" ".join(argv).split())
    return text if width is None or len(text) <= width else text[: width - 3] + "..."


@dataclass(frozen=True)
class FunctionTotal:
    label: str
    self_samples: int
    total_samples: int


#: distinct stacks whose (stack, function) pairs ``function_totals`` builds at a time: bounds its memory to a
#: few arrays of ~chunk x depth entries (65,536 stacks 40 frames deep: ~20 MB each)
TOTALS_CHUNK = 1 << 16


def function_totals(session: Session, config: ExportConfig) -> tuple[list[FunctionTotal], int]:
    """Per function: samples where it is the leaf (self) and where it is anywhere (total, once per
    sample even when it recurses). Returns the totals, most self first, and the number of samples.

    Done in numpy over the prefix tree, level by level: each stack's functions are the labels of its
    nodes' frames, gathered from the leaves towards the root for a chunk of stacks at a time, and made
    unique per stack by a sort. Only the leaf needs the order ``StackDisplays`` shows frames in
    (``_leaf_labels``). Expanding every distinct stack in Python instead (as it was then) took 9.3 s,
    at the end of the recording, for a 4-minute recording at 1 kHz of a C++ program taking random call
    paths (335,000 distinct stacks, 7 million tree nodes); this takes 0.8-1.0 s, and 0.3 s where that
    took 0.6 s for a 10-minute recording of a Python program (66,000 samples)."""
    merged: dict[int, int] = defaultdict(int)
    for per in stack_counts(session, config).values():
        for sid, n in per.items():
            merged[sid] += n
    if not merged:
        return [], 0
    sids = np.fromiter(merged.keys(), dtype=np.int64, count=len(merged))
    counts = np.fromiter(merged.values(), dtype=np.int64, count=len(merged))
    displays = StackDisplays(session, frame_filter(config))
    labels = _FrameLabels(displays)
    columns = session.stacks.columns()
    parent, frame = columns["parent"].astype(np.int64), columns["frame"].astype(np.int64)
    total = np.zeros(len(labels.names), dtype=np.int64)
    shown = np.zeros(len(sids), dtype=bool)  # stacks with a frame left to show
    for lo in range(0, len(sids), TOTALS_CHUNK):
        stacks, labs = _stack_labels(sids[lo : lo + TOTALS_CHUNK], parent, frame, labels)
        pairs = np.sort(stacks * len(labels.names) + labs)
        pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]  # each (stack, label) once
        stacks, labs = pairs // len(labels.names), pairs % len(labels.names)
        total += np.bincount(labs, weights=counts[lo + stacks], minlength=len(total)).astype(np.int64)
        shown[lo + stacks] = True
    leaves = _leaf_labels(displays, sids, parent, frame, labels)
    self_n = np.bincount(leaves[shown], weights=counts[shown], minlength=len(total)).astype(np.int64)
    totals = [FunctionTotal(name, int(self_n[i]), int(total[i])) for i, name in enumerate(labels.names) if total[i]]
    totals.sort(key=lambda t: (-t.self_samples, -t.total_samples, t.label))
    return totals, int(counts[shown].sum())


class _FrameLabels:
    """Per frame id, the ``function_label``s of the frames it shows (itself and the calls inlined at it, as
    ``StackDisplays`` keeps them) as ids into ``names``: ids ``flat[start[fid] : start[fid] + count[fid]]``,
    ``last`` the one shown last (-1: none)."""

    def __init__(self, displays: StackDisplays) -> None:
        ids: dict[str, int] = {}
        flat: list[int] = []
        n = len(displays.session.frames)
        self.start = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.last = np.full(n, -1, dtype=np.int64)
        for fid in range(n):
            shown = [displays.infos[d] for d in displays.of_frame(fid)]
            self.start[fid] = len(flat)
            self.count[fid] = len(shown)
            for f in shown:
                flat.append(ids.setdefault(function_label(f), len(ids)))
            if shown:
                self.last[fid] = flat[-1]
        self.flat = np.array(flat, dtype=np.int64)
        self.ids = ids  #: label -> id
        self.names = list(ids)


def _stack_labels(
    sids: np.ndarray, parent: np.ndarray, frame: np.ndarray, labels: _FrameLabels
) -> tuple[np.ndarray, np.ndarray]:
    """Every (index into ``sids``, label id) of the frames on those stacks, repeats included: one step
    from the leaves towards the root at a time, for all stacks at once."""
    stacks, labs = [], []
    index, node = np.arange(len(sids), dtype=np.int64), sids
    while len(node):
        fids = frame[node]
        n = labels.count[fids]
        # each node's labels: flat[start : start + n], expanded without a Python loop
        offsets = np.repeat(labels.start[fids] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
        stacks.append(np.repeat(index, n))
        labs.append(labels.flat[offsets])
        node = parent[node]
        up = node >= 0
        index, node = index[up], node[up]
    return np.concatenate(stacks), np.concatenate(labs)


def _leaf_labels(
    displays: StackDisplays, sids: np.ndarray, parent: np.ndarray, frame: np.ndarray, labels: _FrameLabels
) -> np.ndarray:
    """The label id of the frame each stack shows last (-1: none). A stack whose last frame is native and
    shows something ends with that: whatever an interpreter frame before it deferred was shown before it.
    The others (ending in runtime frames, or in a frame hidden whole) are expanded (``_shown_at_end``)."""
    kinds = displays.session.frames.kinds()
    fids = frame[sids]
    leaves = labels.last[fids]
    for i in np.nonzero((kinds[fids] == FrameKind.RUNTIME) | (leaves < 0))[0].tolist():
        shown = _shown_at_end(displays, int(sids[i]), parent, frame, kinds)
        leaves[i] = labels.ids[function_label(displays.infos[shown[-1]])] if shown else -1
    return leaves


def _shown_at_end(
    displays: StackDisplays, sid: int, parent: np.ndarray, frame: np.ndarray, kinds: np.ndarray
) -> list[int]:
    """The end of the display ids shown for stack ``sid``: its display from the last frame before its
    closing run of runtime frames on, which is the end of the whole display, as calls deferred before that
    frame come out ahead of it; the whole display where that part shows nothing."""
    tail: list[int] = []
    node = sid
    while node >= 0:
        tail.append(int(frame[node]))
        if int(kinds[tail[-1]]) != FrameKind.RUNTIME:
            break
        node = int(parent[node])
    return displays.expand(tail[::-1]) or displays.expand(displays.session.stacks.frames(sid))


def function_label(frame: FrameInfo) -> str:
    """How a function is shown in tables: its name, and the module (native) or file (runtime) it is in."""
    where = frame.module or frame.file
    if not where or frame.name == where or frame.name.startswith(f"{where}+0x"):  # (an unnamed address)
        return frame.name
    return f"{frame.name} ({where})"
