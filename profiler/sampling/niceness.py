"""nprof's own fair-class priority (its nice value) while it records or dumps: as high as it is permitted,
so that a target whose threads keep every CPU busy does not starve nprof's set-up and end.

Raised only from nice 0 (an nprof started under ``nice`` was lowered on purpose), first thing on the main
thread (``profiler/entry.py``), before numpy's threads and the tracing thread exist, since a new thread
inherits its creator's nice; ``--priority normal`` gives it back (``restore``), and a command nprof starts
gets the nice nprof had (``started_with``).
Why, and what was measured: docs/decisions/nprof-niceness.md."""

from __future__ import annotations

import contextlib
import os
import resource

#: the highest fair-class priority, setpriority(2)'s lowest nice value: it weighs as much as 87 threads at
#: nice 0 (``sched_prio_to_weight``, kernel/sched/core.c: 88761 against 1024)
HIGHEST_NICE = -20

#: the only nice ``raise_nice`` raises from, and so the one ``restore`` and ``started_with`` give back
DEFAULT_NICE = 0

#: whether ``raise_nice`` raised nprof's nice (from DEFAULT_NICE)
_raised = False


def raise_nice() -> None:
    """Take the highest fair-class priority permitted (CAP_SYS_NICE, else RLIMIT_NICE's ceiling), for the
    calling thread and the threads it starts from now on, when it is at nice 0. Where neither permits it
    (an unprivileged user), nothing changes and nothing is said: nprof works at its own nice as before."""
    global _raised
    if _raised or os.getpriority(os.PRIO_PROCESS, 0) != DEFAULT_NICE:
        return  # raised already, or set by whoever started nprof (module docstring)
    for nice in _candidates():
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)  # (0: the calling thread, setpriority(2) NOTES)
        except PermissionError:
            continue
        _raised = True
        return


def restore() -> None:
    """Every thread of nprof back at the nice it started with (``--priority normal``)."""
    global _raised
    if not _raised:
        return
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # (a thread that just ended)
            os.setpriority(os.PRIO_PROCESS, int(tid), DEFAULT_NICE)
    _raised = False


def started_with() -> int | None:
    """The nice nprof was started with, while it is raised: what a command nprof starts gets
    (``LaunchedCommand``'s ``nice``), as it would without nprof. None: nprof's own is unchanged."""
    return DEFAULT_NICE if _raised else None


def _candidates() -> list[int]:
    """HIGHEST_NICE, then the lowest nice RLIMIT_NICE lets an unprivileged thread take (20 - its soft limit,
    setrlimit(2)), if that is still below 0."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NICE)
    ceiling = HIGHEST_NICE if soft == resource.RLIM_INFINITY else max(HIGHEST_NICE, 20 - soft)
    return [HIGHEST_NICE] + ([ceiling] if HIGHEST_NICE < ceiling < 0 else [])
