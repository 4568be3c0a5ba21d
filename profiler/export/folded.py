"""Folded stacks ("collapsed" format of Brendan Gregg's stackcollapse scripts): one line per distinct stack,
frames root first separated by ';', then a space and the sample count. flamegraph.pl, inferno and speedscope
read it. Frames are named ``function (file)``, or ``function (file:line)`` with ``--lines``
(``tree/frame_identity.py``). A session of several processes (``--subprocesses``) has each process as a root frame, and
``--threads`` puts each thread under it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from profiler.config import ExportConfig
from profiler.export.base import Exporter
from profiler.model import FrameInfo
from profiler.profile.session import Session
from profiler.tree.calltree import frame_filter, process_labels, stack_counts, thread_label
from profiler.tree.display import StackDisplays
from profiler.tree.frame_identity import frame_label


def folded_label(text: str) -> str:
    """``text`` made safe as one frame of a line: ';' separates frames and a line ends at a newline (a
    thread name, a ``python -c`` command line or a file name may hold either). The count after the last
    ' ' is found from the end, so spaces are kept."""
    return text.replace(";", ":").replace("\r", " ").replace("\n", " ")


def folded_name(frame: FrameInfo, lines: bool) -> str:
    """A frame as one frame of a line: ``frame_identity.frame_label``, per line or per function."""
    return folded_label(frame_label(frame, lines))


#: bytes of lines handed to the writer at a time: a write per MiB costs nothing next to formatting the lines,
#: and holds nothing next to the lines themselves
PIECE_BYTES = 1 << 20


class FoldedExporter(Exporter):
    format = "folded"
    extensions = (".folded", ".txt", ".collapsed")

    def render(self, session: Session, config: ExportConfig) -> bytearray:
        """The whole file as bytes (``pieces`` joined)."""
        out = bytearray()
        for piece in self.pieces(session, config):
            out += piece
        return out

    def pieces(self, session: Session, config: ExportConfig) -> Iterator[bytearray]:
        """The file's lines in order, in pieces of about PIECE_BYTES, each line leaving the dictionary of
        lines as it goes out: the text is held once, by that dictionary, where a file built whole held it
        twice (a report of 335,000 distinct stacks: 383 MiB of text, 987 MiB at the peak). Before, the
        dictionary, a list of the lines, their join and its encoding each held it (3.1 GB at the peak of a
        434 MB file of a long recording of a program taking random call paths)."""
        displays = StackDisplays(session, frame_filter(config), config.lines, config.hide_interpreter)
        # per display id, not per frame of every stack
        names = [folded_name(f, config.lines).encode() for f in displays.infos]
        processes = process_labels(session)
        # samples per stack under each root prefix: a stack several threads ran is expanded once per prefix
        by_prefix: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for thread, per in stack_counts(session, config).items():
            t = session.threads[thread]
            roots = [processes.get(t.pid), thread_label(t) if config.threads else None]
            counts = by_prefix["".join(folded_label(root) + ";" for root in roots if root is not None)]
            for sid, n in per.items():
                counts[sid] += n
        lines: dict[bytes, int] = defaultdict(int)
        for prefix, counts in by_prefix.items():
            head = prefix.encode()
            for shown, n in zip(displays.many(list(counts)), counts.values()):
                if shown:
                    lines[head + b";".join(map(names.__getitem__, shown))] += n
        stacks = sorted(lines, reverse=True)  # UTF-8 sorts as the text it encodes does; taken from the end
        piece = bytearray()
        while stacks:
            stack = stacks.pop()
            piece += b"%s %d\n" % (stack, lines.pop(stack))
            if len(piece) >= PIECE_BYTES:
                yield piece
                piece = bytearray()
        if piece:
            yield piece
