"""The ``nprof`` command line.

numpy is imported here first, inside ``sigchld_blocked``: the worker threads its BLAS library starts at
import then block SIGCHLD for good, so the tracer can wait for tracee events with ``sigtimedwait``
(``profiler/target/events.py`` says why that needs every thread).
"""

from profiler.target.events import sigchld_blocked

with sigchld_blocked():
    import numpy  # noqa: F401
