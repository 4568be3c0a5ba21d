"""Views over a session's samples: which samples count, the stacks they hold, and per-function totals.

Everything here works per *distinct* (thread, stack) pair, never per sample, so its cost is bounded by the
number of distinct stacks whatever the recording's length.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    for (thread, stack, _stop, cls), n in session.samples.items():
        if stack < 0 or not included(cls, config):
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
    info = session.frame_info or []
    inlined = session.inlined
    kinds = session.frames.kinds()
    runtime = [int(kinds[fid]) == FrameKind.RUNTIME for fid in fids] + [False]
    out: list[tuple[int, FrameInfo]] = []
    deferred: list[tuple[int, FrameInfo]] = []
    for i, fid in enumerate(fids):
        if deferred and not runtime[i]:
            out.extend(deferred)
            deferred = []
        frame = info[fid] if fid < len(info) else FrameInfo(f"#{fid}")
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


def function_totals(session: Session, config: ExportConfig) -> tuple[list[FunctionTotal], int]:
    """Per function: samples where it is the leaf (self) and where it is anywhere (total, once per
    sample even when it recurses). Returns the totals, most self first, and the number of samples."""
    keep = frame_filter(config)
    self_n: dict[str, int] = defaultdict(int)
    total_n: dict[str, int] = defaultdict(int)
    samples = 0
    merged: dict[int, int] = defaultdict(int)
    for per in stack_counts(session, config).values():
        for sid, n in per.items():
            merged[sid] += n
    for sid, n in merged.items():
        frames = stack_display(session, sid, keep)
        if not frames:
            continue
        samples += n
        labels = [function_label(f) for f in frames]
        self_n[labels[-1]] += n
        for label in set(labels):
            total_n[label] += n
    totals = [FunctionTotal(label, self_n.get(label, 0), total) for label, total in total_n.items()]
    totals.sort(key=lambda t: (-t.self_samples, -t.total_samples, t.label))
    return totals, samples


def function_label(frame: FrameInfo) -> str:
    """How a function is shown in tables: its name, and the module (native) or file (runtime) it is in."""
    where = frame.module or frame.file
    if not where or frame.name == where or frame.name.startswith(f"{where}+0x"):  # (an unnamed address)
        return frame.name
    return f"{frame.name} ({where})"
