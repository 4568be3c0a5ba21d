"""Views over a session's samples: which samples count, the stacks they hold, and how processes are labelled.
How each stack is shown is ``display.py``'s; the per-function totals are ``totals.py``'s.

Everything here works per *distinct* (thread, stack) pair, never per sample, so its cost is bounded by the
number of distinct stacks whatever the recording's length.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from profiler.config import ExportConfig
from profiler.model import FrameInfo, SampleClass
from profiler.profile.session import ProfiledThread, Session


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


def thread_label(thread: ProfiledThread) -> str:
    """How outputs name a thread: its name, as the program set it (``thread_naming.py``), and its id."""
    return f"{thread.name} (tid {thread.tid})"


def command_line(argv: Sequence[str], width: int | None = None) -> str:
    """``argv`` as one line, of at most ``width`` characters if given: runs of whitespace (the newlines of a
    ``python -c`` program) become one space, and a cut ends in "..."."""
    text = " ".join(" ".join(argv).split())
    return text if width is None or len(text) <= width else text[: width - 3] + "..."
