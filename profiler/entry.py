"""The ``nprof`` console script and ``python -m profiler``: the command line, imported under a handler.

Importing the command line imports numpy, pyelftools, capstone and every room of the engine: 0.5-1.8 s on
the 2-core machines here. Ctrl-C in that time raised KeyboardInterrupt out of an import, before the
command line's own handler existed, and Python printed a traceback (4 of 12 SIGINTs sent 0.5-1.2 s after
launch), and so did one that came while the command line parsed its arguments (argparse: 2 of 42 sent
0.24-0.30 s after launch). Nothing is attached or written before a command runs, so there is nothing to
undo; a command's own run handles KeyboardInterrupt itself.
It lives outside ``profiler/cli``, whose package import is itself the slow part (numpy, at once).
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    try:
        from profiler.cli.main import main as run

        code = run()
    except KeyboardInterrupt:
        code = 130
        print("nprof: interrupted while starting; nothing was recorded", file=sys.stderr)
    _ignore_stop_signals()
    return code


def _ignore_stop_signals() -> None:
    """The command is done and its exit code decided: SIGINT and SIGTERM are ignored on the way out. The
    second of a pair (a terminal's Ctrl-C reaches the process group, `timeout` signals its child and then
    the group) came after ``nprof record`` had written everything in 1 of 8 recordings of 0.5 s: under
    Python's handler it raised KeyboardInterrupt in the interpreter's shutdown, and Python ended the
    process by SIGINT (status -2). (Ignored, not left to a Python handler, which the shutdown resets to
    the default.)"""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
