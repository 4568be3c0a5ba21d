"""Following a target's child processes (``--subprocesses``), and noticing when a process execs.

Children are found through /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN), which lists the children
each thread forked: one small read per thread instead of a scan of all of /proc. A scan runs every
``SCAN_INTERVAL``, so a child is picked up within about 100 ms of its birth; children of children are
found the same way once their parent is followed.
"""

from __future__ import annotations

import os
import time

from profiler.target.procfs import read_text, split_stat

#: time between two scans for new children or execs
SCAN_INTERVAL = 0.1


def program_identity(pid: int) -> tuple[int, int, int] | None:
    """(device, inode) of the running executable, and the start of its stack (``startstack``, field 28 of
    /proc/PID/stat, proc(5)): it changes when the process execs. The executable alone does not, where a
    program execs itself (multiprocessing's spawn: a fork of python that execs python); the stack a new
    program gets is placed at random (address space layout randomization), so its start tells two
    images apart with near certainty. None if the process is gone."""
    stat = read_text(f"/proc/{pid}/stat")
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return (st.st_dev, st.st_ino, int(split_stat(stat)[28])) if stat is not None else None


class ChildWatcher:
    """Rate-limited scans for new children and for processes that exec'd since the last scan."""

    def __init__(self) -> None:
        self._last = 0.0
        self._programs: dict[int, tuple[int, int, int] | None] = {}

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < SCAN_INTERVAL:
            return False
        self._last = now
        return True

    def remember(self, pid: int) -> None:
        self._programs[pid] = program_identity(pid)

    def exec_happened(self, pid: int) -> bool:
        """True once after ``pid`` replaced its program image."""
        now = program_identity(pid)
        if now is None or now == self._programs.get(pid):
            return False
        self._programs[pid] = now
        return True
