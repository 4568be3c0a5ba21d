"""The table of top functions: per function, the samples where it is the leaf (self) and where it is
anywhere on the stack (total), over the prefix tree in numpy rather than one displayed stack at a time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from profiler.config import ExportConfig
from profiler.model import FrameInfo, FrameKind, Mechanism
from profiler.profile.session import Session
from profiler.tree.calltree import frame_filter, stack_counts
from profiler.tree.display import StackDisplays, tree_levels
from profiler.tree.mechanics import MECHANISMS, label, stack_mechanics
from profiler.tree.source_paths import short_path
from profiler.tree.startup_mask import StartupMask


@dataclass(frozen=True)
class FunctionTotal:
    label: str
    self_samples: int
    total_samples: int
    #: samples whose innermost runtime (Python) frame is this function, whatever native code ran below it
    python_samples: int = 0
    #: a line that stands for a runtime's mechanism (``mechanics.py``), not for one function
    mechanism: Mechanism | None = None


#: distinct stacks whose (stack, function) pairs ``function_totals`` builds at a time: bounds its memory to a
#: few arrays of ~chunk x depth entries (65,536 stacks 40 frames deep: ~20 MB each)
TOTALS_CHUNK = 1 << 16


def function_totals(session: Session, config: ExportConfig) -> tuple[list[FunctionTotal], int]:
    """Per function: samples where it is the leaf (self) and where it is anywhere (total, once per
    sample even when it recurses), and where it is the innermost runtime frame (Python self). Returns the
    totals, most self first, and the number of samples.

    A runtime's mechanisms (GIL hand-off, waiting for the GIL, garbage collection, import) have lines of
    their own (``mechanics.py``): a sample whose leaf ran for one is that line's self, not its leaf's; a
    line's total counts the samples with one of its frames on the stack, and its Python self those whose
    innermost runtime frame is one of its own (importlib's).

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
    displays = StackDisplays(session, frame_filter(config), lines=False, hide_startup=config.hide_interpreter)
    labels = _FrameLabels(displays)
    columns = session.stacks.columns()
    parent, frame = columns["parent"].astype(np.int64), columns["frame"].astype(np.int64)
    leaves = _leaf_labels(displays, sids, parent, frame, labels)
    python_leaves = np.full(len(sids), -1, dtype=np.int64)
    if labels.any_group or bool((session.frames.kinds() == FrameKind.RUNTIME).any()):
        found = stack_mechanics(displays, sids, parent, frame)
        group = np.array([labels.ids[label(m)] if m is not None else -1 for m in found.mechanism], dtype=np.int64)
        leaves = np.where(group >= 0, group, leaves)
        has = found.runtime_leaf >= 0
        python_leaves[has] = labels.python[found.runtime_leaf[has]]
    total = np.zeros(len(labels.names), dtype=np.int64)
    shown = np.zeros(len(sids), dtype=bool)  # stacks with a frame left to show
    for lo in range(0, len(sids), TOTALS_CHUNK):
        stacks, labs = _stack_labels(sids[lo : lo + TOTALS_CHUNK], parent, frame, labels)
        grouped = np.nonzero(leaves[lo : lo + TOTALS_CHUNK] >= labels.flat_names)[0]  # a line's own self
        stacks, labs = np.concatenate((stacks, grouped)), np.concatenate((labs, leaves[lo + grouped]))
        pairs = np.sort(stacks * len(labels.names) + labs)
        pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]  # each (stack, label) once
        stacks, labs = pairs // len(labels.names), pairs % len(labels.names)
        total += np.bincount(labs, weights=counts[lo + stacks], minlength=len(total)).astype(np.int64)
        shown[lo + stacks] = True
    self_n = np.bincount(leaves[shown], weights=counts[shown], minlength=len(total)).astype(np.int64)
    python = shown & (python_leaves >= 0)
    python_n = np.bincount(python_leaves[python], weights=counts[python], minlength=len(total)).astype(np.int64)
    totals = [FunctionTotal(name, int(self_n[i]), int(total[i]), int(python_n[i]), labels.mechanisms.get(i))
              for i, name in enumerate(labels.names) if total[i]]  # fmt: skip
    totals.sort(key=lambda t: (-t.self_samples, -t.total_samples, t.label))
    return totals, int(counts[shown].sum())


class _FrameLabels:
    """Per frame id, the ``function_label``s of the frames it shows (itself and the calls inlined at it, as
    ``StackDisplays`` keeps them) as ids into ``names``: ids ``flat[start[fid] : start[fid] + count[fid]]``
    (``flat`` is the label of each display id, whose ids are consecutive per frame), ``last`` the one shown
    last (-1: none)."""

    def __init__(self, displays: StackDisplays) -> None:
        ids: dict[str, int] = {}
        self.flat = np.array([ids.setdefault(function_label(f), len(ids)) for f in displays.infos], dtype=np.int64)
        self.flat_names = len(ids)  #: ids below this are functions'; from it on, the mechanisms' lines
        self.mechanisms = {ids.setdefault(label(m), len(ids)): m for m in MECHANISMS}  #: line id -> mechanism
        #: per display id, the line of its mechanism (-1: none), and its label as the Python self column
        #: counts it: a runtime frame of a mechanism (importlib's) counts as that line
        self.group = np.array([ids[label(f.mechanism)] if f.mechanism is not None else -1 for f in displays.infos],
                              dtype=np.int64)  # fmt: skip
        self.any_group = bool((self.group >= 0).any())
        self.python = np.where(self.group >= 0, self.group, self.flat)
        shown = [displays.of_frame(fid) for fid in range(len(displays.session.frames))]
        self.count = np.array([len(d) for d in shown], dtype=np.int64)
        self.start = np.array([d[0] if d else 0 for d in shown], dtype=np.int64)
        self.last = np.full(len(shown), -1, dtype=np.int64)
        some = self.count > 0
        self.last[some] = self.flat[(self.start + self.count - 1)[some]]
        self.ids = ids  #: label -> id
        self.names = list(ids)
        self.startup = StartupMask(displays, self.count)


def _stack_labels(
    sids: np.ndarray, parent: np.ndarray, frame: np.ndarray, labels: _FrameLabels
) -> tuple[np.ndarray, np.ndarray]:
    """Every (index into ``sids``, label id) of the frames on those stacks, repeats included, for all
    stacks at once a tree level at a time."""
    stacks, labs = [], []
    levels: Iterable[tuple[np.ndarray, np.ndarray]] = tree_levels(sids, parent, frame)
    skips = None
    if labels.startup.any:  # --hide-interpreter, with start-up frames: which each stack shows depends on it
        levels = list(levels)
        skips = labels.startup.skips(levels, len(sids))
    for level, (index, fids) in enumerate(levels):
        start, n = labels.start[fids], labels.count[fids]
        if skips is not None:
            start, n = start + skips[level], n - skips[level]
        # each node's labels: flat[start : start + n], expanded without a Python loop
        offsets = np.repeat(start - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
        stacks.append(np.repeat(index, n))
        labs.append(labels.flat[offsets])
        if labels.any_group:  # the line of each frame's mechanism, besides its function
            groups = labels.group[offsets]
            some = groups >= 0
            stacks.append(np.repeat(index, n)[some])
            labs.append(groups[some])
    return np.concatenate(stacks), np.concatenate(labs)


def _leaf_labels(
    displays: StackDisplays, sids: np.ndarray, parent: np.ndarray, frame: np.ndarray, labels: _FrameLabels
) -> np.ndarray:
    """The label id of the frame each stack shows last (-1: none). A stack whose last frame is native and
    shows something ends with that: whatever an interpreter frame before it deferred was shown before it.
    The others (ending in runtime frames, or in a frame hidden whole) are expanded (``_shown_at_end``)."""
    kinds = displays.session.frames.kinds()
    fids = frame[sids]
    leaves: np.ndarray = labels.last[fids]
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
    return displays.expand(tail[::-1], whole=False) or displays.expand(displays.session.stacks.frames(sid))


def function_label(frame: FrameInfo) -> str:
    """How a function is shown in tables: its name, and the module (native) or file (runtime) it is in."""
    where = frame.module or (short_path(frame.file, frame.source_root) if frame.file else None)
    if not where or frame.name == where or frame.name.startswith(f"{where}+0x"):  # (an unnamed address)
        return frame.name
    return f"{frame.name} ({where})"
