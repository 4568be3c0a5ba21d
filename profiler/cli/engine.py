"""The engine's import, made by a command once its arguments and its target have been checked.

The command line itself imports nothing heavy (numpy, pyelftools, python-ptrace, nprof's engine): a usage
error or a wrong pid is answered in the time Python takes to start, and ``--help`` too
(docs/decisions/start-up-latency.md). ``tests/unit/test_cli_imports.py`` keeps it so.

numpy is imported first, inside ``sigchld_blocked``: the worker threads its BLAS library starts at import
then block SIGCHLD for good, so the tracer can wait for tracee events with ``sigtimedwait``
(``profiler/target/events.py`` says why that needs every thread), and SIGXCPU, so that the kernel hands it
to the main thread, where Python runs the handler that drops the sampling thread's real-time priority
(``profiler/sampling/priority.py``).
"""

from __future__ import annotations

import importlib
import signal
from types import ModuleType

from profiler.cli.stop import SetupInterrupted, sigint_noted


def load_engine(module: str) -> ModuleType:
    """Import numpy as the module docstring says, then ``module`` (a command's own, which imports the rest),
    with SIGINT only noted meanwhile (``stop.sigint_noted``): one that came ends the start-up after it,
    with nothing attached yet (``SetupInterrupted``)."""
    from profiler.target.events import sigchld_blocked

    with sigint_noted() as noted:
        with sigchld_blocked(also=(signal.SIGXCPU,)):
            import numpy  # noqa: F401
        loaded = importlib.import_module(module)
    if noted:
        raise SetupInterrupted(signal.SIGINT)
    return loaded
