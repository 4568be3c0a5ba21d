"""The ``nprof`` command line.

numpy is imported here first, inside ``sigchld_blocked``: the worker threads its BLAS library starts at
import then block SIGCHLD for good, so the tracer can wait for tracee events with ``sigtimedwait``
(``profiler/target/events.py`` says why that needs every thread), and SIGXCPU, so that the kernel hands it
to the main thread, where Python runs the handler that drops the sampling thread's real-time priority
(``profiler/sampling/priority.py``).
"""

import signal

from profiler.target.events import sigchld_blocked

with sigchld_blocked(also=(signal.SIGXCPU,)):
    import numpy  # noqa: F401
