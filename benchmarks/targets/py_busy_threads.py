"""Benchmark target: a busy threaded CPython process, for the latencies of ``dump --pid`` and ``record --pid``:
N threads each running a pure-Python loop in short bursts with a short sleep after each (so they take turns
at the GIL and are found both running and asleep), the main thread asleep.

usage: python py_busy_threads.py READY_FD N   (writes "ready" to READY_FD once every thread has run a burst)
"""

import os
import sys
import threading
import time

BURST = 10_000  #: loop iterations per burst: 0.45 ms of CPython 3.12.1 here (median of 200, 2026-11-29)
PAUSE = 0.001  #: seconds asleep after each burst


def spin(started):
    x = 0
    for i in range(BURST):
        x += i * i
    started.release()
    while True:
        for i in range(BURST):
            x += i * i
        time.sleep(PAUSE)


def main():
    ready_fd, count = int(sys.argv[1]), int(sys.argv[2])
    started = threading.Semaphore(0)
    for _ in range(count):
        threading.Thread(target=spin, args=(started,), daemon=True).start()
    for _ in range(count):
        started.acquire()
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    threading.Event().wait()


main()
