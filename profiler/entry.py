"""The ``nprof`` console script and ``python -m profiler``: the command line, imported with Ctrl-C held.

Importing the engine (numpy, pyelftools, python-ptrace, nprof's rooms) took 0.5-1.8 s on the 2-core machines
here, when the command line imported it whole. Ctrl-C in that time raised KeyboardInterrupt out of an
import, before the command line's own handler existed, and Python printed a traceback (4 of 12 SIGINTs sent
0.5-1.2 s after launch). Catching it was not enough: an import that defines a dataclass runs its generated
methods' source through ``exec``, and CPython marks a KeyboardInterrupt raised there as unhandled even once
it is caught, and ends a ``python -m profiler`` run by SIGINT after its exit code has been chosen (status -2
after nprof's "interrupted" message, 3 of 60 SIGINTs sent 0.20-0.30 s after launch). So SIGINT is only noted
while the import runs, and answered after it; nothing is attached or written by then, so there is nothing to
undo (``cli/stop.sigint_noted``; the engine's own import, once a command's arguments and target are checked,
is held the same way: ``cli/engine.py``). The commands take over from there (``cli/stop.StopFlag``); one
that came while the command line parsed its arguments (argparse) is caught here too.

``record``, ``dump`` and ``demo`` take the highest fair-class priority permitted before that import
(``sampling/niceness.py``): next to a target whose threads keep every CPU busy, the import alone took
seconds at nice 0, and every thread the import starts inherits the priority.
"""

from __future__ import annotations

import signal
import sys

from profiler.sampling import niceness

#: the commands that attach to a target, which the target's busy threads must not starve
_ATTACHING = ("record", "dump", "demo")


def main() -> int:
    if sys.argv[1:2] and sys.argv[1] in _ATTACHING:
        niceness.raise_nice()  # ``record --priority normal`` gives it back once its arguments are read
    from profiler.cli.stop import sigint_noted

    code = 130
    noted: list[int] = []
    try:
        with sigint_noted() as noted:
            from profiler.cli.main import main as run
        if not noted:
            code = run()
    except KeyboardInterrupt:
        noted.append(signal.SIGINT)
    if noted:
        print("nprof: interrupted by SIGINT while starting; nothing was recorded", file=sys.stderr)
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
