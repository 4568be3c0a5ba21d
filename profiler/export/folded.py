"""Folded stacks ("collapsed" format of Brendan Gregg's stackcollapse scripts): one line per distinct stack,
frames root first separated by ';', then a space and the sample count. flamegraph.pl, inferno and speedscope
read it. A session of several processes (``--subprocesses``) has each process as a root frame, and
``--threads`` puts each thread under it."""

from __future__ import annotations

from collections import defaultdict

from profiler.config import ExportConfig
from profiler.model import FrameInfo
from profiler.sampling.session import Session
from profiler.tree.calltree import frame_filter, process_labels, stack_counts, stack_display


def folded_label(text: str) -> str:
    """``text`` made safe as one frame of a line: ';' separates frames and a line ends at a newline (a
    thread name, a ``python -c`` command line or a file name may hold either). The count after the last
    ' ' is found from the end, so spaces are kept."""
    return text.replace(";", ":").replace("\r", " ").replace("\n", " ")


def folded_name(frame: FrameInfo) -> str:
    name = frame.name
    if frame.module and not frame.file:
        name = f"{name} [{frame.module}]"
    elif frame.file:
        name = f"{name} ({frame.file}:{frame.line})" if frame.line else f"{name} ({frame.file})"
    return folded_label(name)


class FoldedExporter:
    format = "folded"
    extensions = (".folded", ".txt", ".collapsed")

    def render(self, session: Session, config: ExportConfig) -> bytes:
        keep = frame_filter(config)
        lines: dict[str, int] = defaultdict(int)
        processes = process_labels(session)
        for thread, per in stack_counts(session, config).items():
            t = session.threads[thread]
            roots = [processes.get(t.pid), f"{t.name} (tid {t.tid})" if config.threads else None]
            prefix = "".join(folded_label(root) + ";" for root in roots if root is not None)
            for sid, n in per.items():
                frames = stack_display(session, sid, keep)
                if frames:
                    lines[prefix + ";".join(folded_name(f) for f in frames)] += n
        return "".join(f"{stack} {n}\n" for stack, n in sorted(lines.items())).encode()
