"""nprof's own fair-class priority (its nice value) while it records or dumps: as high as it is permitted, so
that a target whose threads keep every CPU busy does not starve nprof's own work.

Why. The fair scheduler shares a CPU among runnable threads by weight, and a thread at nice 0 weighs as
much as each busy thread of the target. nprof's set-up (its import of numpy, capstone and pyelftools, the
attach, the first reads of each module's symbols and CFI) and its end (symbols, the output) are a fraction
of a second of CPU, but next to 50 busy threads on 2 CPUs nprof had 3% of a CPU. Measured here
(2026-11-24, kernel 6.18, 2 vCPUs; a C target of N threads that spin, ``nprof record --pid P -d 1``):

* 50 threads: 15.7 s from launch to exit at nice 0 (0.6 s of CPU); 4.6-5.2 s with this module (three
  runs), 2.1-2.4 s under ``nice -n -20`` from the start. The difference is the interpreter's own start,
  before nprof's code runs: ``python3 -c pass`` took 3.5 s next to the same target. The recording's second
  had 1,106 samples at nice 0 and 1,900-2,100 raised (held 8-9 us per stop either way);
* 200 threads: 62.5 s at nice 0, and no sample at all (the attach outlasted -d, since fixed in
  ``Sampler.run``); 22.6 s raised, with 2,680 samples, of which ``python3 -c pass`` takes 16.4 s.

The sampling thread's wake-ups and stops run at real-time priority (``priority.py``); this is for the rest,
which is fair-class work of bounded length. Raised, nprof costs the target no more CPU per sample: it takes
the samples it was asked for, where it took fewer and later at nice 0, and keeps threads stopped no longer.

Only from nice 0, the default: an nprof started under ``nice -n 10`` was lowered on purpose, and one
already below 0 has what it needs.

Nice is a per-thread attribute on Linux (setpriority(2), NOTES) that a new thread inherits from the one that
creates it, so ``raise_nice`` runs first thing on the main thread (``profiler/entry.py``), before the import
starts numpy's BLAS threads and before the tracing thread exists. ``--priority normal`` gives it back for
every thread (``restore``). A command nprof starts gets the nice nprof had (``started_with``), as it would have
without nprof.
"""

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
