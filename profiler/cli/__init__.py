"""The ``nprof`` command line.

numpy is imported here first, with SIGCHLD blocked for the duration of the import: the worker threads its
BLAS library starts at import inherit that mask and keep it, so every thread of nprof blocks SIGCHLD once
the tracer blocks it in the main thread, and the tracer can wait for tracee events with ``sigtimedwait``
(``profiler/target/events.py`` says why that needs every thread). The main thread's mask is restored at
once: a command nprof spawns must not inherit a blocked SIGCHLD.
"""

import signal

_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
try:
    import numpy  # noqa: F401
finally:
    signal.pthread_sigmask(signal.SIG_SETMASK, _mask)
    del _mask
