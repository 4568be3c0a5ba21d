"""Following a target's child processes (``--subprocesses``), and noticing when a process execs.

Children are found through /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN), which lists the children
each thread forked: one small read per thread instead of a scan of all of /proc. A scan runs every
``SCAN_INTERVAL``, so a child is picked up within about 100 ms of its birth; children of children are
found the same way once their parent is followed.
"""

from __future__ import annotations

import os
import time

#: time between two scans for new children or execs
SCAN_INTERVAL = 0.1


def exe_identity(pid: int) -> tuple[int, int] | None:
    """(device, inode) of the running executable; it changes when the process execs."""
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return st.st_dev, st.st_ino


class ChildWatcher:
    """Rate-limited scans for new children and for processes that exec'd since the last scan."""

    def __init__(self) -> None:
        self._last = 0.0
        self._exe: dict[int, tuple[int, int] | None] = {}

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < SCAN_INTERVAL:
            return False
        self._last = now
        return True

    def remember(self, pid: int) -> None:
        self._exe[pid] = exe_identity(pid)

    def exec_happened(self, pid: int) -> bool:
        """True once after ``pid`` replaced its program image."""
        now = exe_identity(pid)
        if now is None or now == self._exe.get(pid):
            return False
        self._exe[pid] = now
        return True
