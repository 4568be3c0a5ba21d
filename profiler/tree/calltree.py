"""Views over a session's samples: which samples count, the stacks they hold, and per-function totals.

Everything here works per *distinct* (thread, stack) pair, never per sample, so its cost is bounded by the
number of distinct stacks whatever the recording's length.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
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


def stack_display(session: Session, sid: int, keep: Callable[[FrameInfo], bool]) -> list[FrameInfo]:
    """What a person sees for stack ``sid``, outermost first, without hidden frames (``expand_stack``)."""
    return [info for _fid, info in expand_stack(session, session.stacks.frames(sid), keep)]


def frame_info(session: Session, fid: int) -> FrameInfo:
    """What frame ``fid`` is called (``#fid`` in a session not symbolized that far)."""
    info = session.frame_info
    return info[fid] if info is not None and fid < len(info) else FrameInfo(f"#{fid}")


def expand_stack(
    session: Session, fids: Sequence[int], keep: Callable[[FrameInfo], bool]
) -> list[tuple[int, FrameInfo]]:
    """Frame ids ``fids`` (outermost first) as shown, each with the frame id it came from: each frame's
    function, then the calls inlined into it at that address, each its own frame; each left out where
    ``keep`` says so, an inlined call on its own (a call helper inlined into a C function is hidden with
    ``--hide-interpreter`` just as its out-of-line copy is).

    One exception keeps the order true: the calls inlined into an eval loop (``do_call_core``,
    ``eval_frame_handle_pending``, ``call_function`` in CPython) run on behalf of the newest runtime frame
    that loop activation executes, so when runtime frames were interleaved at an interpreter frame, its
    inlined calls come after them, not between the loop and the Python functions it runs.
    """
    inlined = session.inlined
    kinds = session.frames.kinds()
    runtime = [int(kinds[fid]) == FrameKind.RUNTIME for fid in fids] + [False]
    out: list[tuple[int, FrameInfo]] = []
    deferred: list[tuple[int, FrameInfo]] = []
    for i, fid in enumerate(fids):
        if deferred and not runtime[i]:
            out.extend(deferred)
            deferred = []
        frame = frame_info(session, fid)
        if keep(frame):
            out.append((fid, frame))
        calls = [(fid, f) for f in inlined.get(fid, ()) if keep(f)]
        if frame.interpreter and runtime[i + 1]:
            deferred = calls
        else:
            out.extend(calls)
    out.extend(deferred)
    return out


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
    unique per stack by a sort. Only the leaf needs the order ``expand_stack`` shows frames in
    (``_leaf_labels``). Expanding every distinct stack in Python instead (``stack_display``) took 9.3 s,
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
    keep = frame_filter(config)
    labels = _FrameLabels(session, keep)
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
    leaves = _leaf_labels(session, sids, parent, frame, labels, keep)
    self_n = np.bincount(leaves[shown], weights=counts[shown], minlength=len(total)).astype(np.int64)
    totals = [FunctionTotal(name, int(self_n[i]), int(total[i])) for i, name in enumerate(labels.names) if total[i]]
    totals.sort(key=lambda t: (-t.self_samples, -t.total_samples, t.label))
    return totals, int(counts[shown].sum())


class _FrameLabels:
    """Per frame id, the ``function_label``s of the frames it shows (itself and the calls inlined at it, as
    ``expand_stack`` keeps them) as ids into ``names``: ids ``flat[start[fid] : start[fid] + count[fid]]``,
    ``last`` the one shown last (-1: none)."""

    def __init__(self, session: Session, keep: Callable[[FrameInfo], bool]) -> None:
        ids: dict[str, int] = {}
        flat: list[int] = []
        n = len(session.frames)
        self.start = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.last = np.full(n, -1, dtype=np.int64)
        for fid in range(n):
            shown = [f for f in (frame_info(session, fid), *session.inlined.get(fid, ())) if keep(f)]
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
    session: Session,
    sids: np.ndarray,
    parent: np.ndarray,
    frame: np.ndarray,
    labels: _FrameLabels,
    keep: Callable[[FrameInfo], bool],
) -> np.ndarray:
    """The label id of the frame each stack shows last (-1: none). A stack whose last frame is native and
    shows something ends with that: whatever an interpreter frame before it deferred was shown before it.
    The others (ending in runtime frames, or in a frame hidden whole) go through ``expand_stack``."""
    kinds = session.frames.kinds()
    fids = frame[sids]
    leaves = labels.last[fids]
    for i in np.nonzero((kinds[fids] == FrameKind.RUNTIME) | (leaves < 0))[0].tolist():
        shown = _shown_at_end(session, int(sids[i]), parent, frame, kinds, keep)
        leaves[i] = labels.ids[function_label(shown[-1][1])] if shown else -1
    return leaves


def _shown_at_end(
    session: Session,
    sid: int,
    parent: np.ndarray,
    frame: np.ndarray,
    kinds: np.ndarray,
    keep: Callable[[FrameInfo], bool],
) -> list[tuple[int, FrameInfo]]:
    """The end of what ``expand_stack`` shows for stack ``sid``: its display from the last frame before its
    closing run of runtime frames on, which is the end of the whole display, as calls deferred before that
    frame come out ahead of it; the whole display where that part shows nothing."""
    tail: list[int] = []
    node = sid
    while node >= 0:
        tail.append(int(frame[node]))
        if int(kinds[tail[-1]]) != FrameKind.RUNTIME:
            break
        node = int(parent[node])
    return expand_stack(session, tail[::-1], keep) or expand_stack(session, session.stacks.frames(sid), keep)


def function_label(frame: FrameInfo) -> str:
    """How a function is shown in tables: its name, and the module (native) or file (runtime) it is in."""
    where = frame.module or frame.file
    if not where or frame.name == where or frame.name.startswith(f"{where}+0x"):  # (an unnamed address)
        return frame.name
    return f"{frame.name} ({where})"
