"""The C library, bound once for every ctypes call nprof makes (ptrace, waits, timers, signal sets).

``use_errno`` makes ctypes keep each call's errno for ``ctypes.get_errno()``. Each module takes the
functions it needs from this one handle and declares their types itself (the ones called per stop declare
only ``restype``: ptrace.py, "The calls"); no two modules use the same function but ``syscall``, declared
here for the system calls glibc has no wrapper for.
"""

from __future__ import annotations

import ctypes

libc = ctypes.CDLL("libc.so.6", use_errno=True)  # glibc >= 2.34 also has the timer_* functions (no librt)

#: syscall(2): the system calls glibc has no wrapper for (kcmp in process.py, tgkill in tracing_thread.py)
syscall = libc.syscall
syscall.restype = ctypes.c_long
