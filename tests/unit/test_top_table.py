"""The table of top functions at the end of a recording, when there is nothing to put in it."""

from __future__ import annotations

from profiler.cli.status import top_table
from profiler.config import ExportConfig
from profiler.sampling.session import Session, SessionMeta
from profiler.tree.calltree import command_line


def test_threads_that_slept_through_the_recording_are_explained():
    """A process asleep for the whole recording has no sample at all without --idle (its threads are not
    stopped, and have no stack to count again): 'No samples to show (--idle to include)' sent users to a
    report --idle that was just as empty."""
    session = Session(SessionMeta(pid=7, command=["sleeper"]))
    session.thread_index(7, 7, 1, "sleeper")
    assert top_table(session, ExportConfig()).startswith("No samples: every thread slept for the whole recording")
    session.meta.idle_stacks = True  # recorded with --idle: they would have been stopped and counted
    assert top_table(session, ExportConfig()) == "No samples to show (idle excluded, --idle to include)."


def test_a_command_line_is_one_line_cut_only_when_asked():
    """A ``python -c`` program's newlines broke the status line and dump's header across lines."""
    argv = ["python3", "-c", "import time\nwhile True:\n    time.sleep(1)"]
    assert command_line(argv) == "python3 -c import time while True: time.sleep(1)"
    assert command_line(argv, 16) == "python3 -c im..."
