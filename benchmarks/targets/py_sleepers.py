"""Benchmark target: N Python threads asleep on one Event (a server's idle workers), for ``nprof dump``.

usage: python py_sleepers.py READY_FD N   (writes "ready" to READY_FD once every thread waits)
"""

import os
import sys
import threading

ready_fd, count = int(sys.argv[1]), int(sys.argv[2])
release = threading.Event()
workers = [threading.Thread(target=release.wait, daemon=True) for _ in range(count)]
for worker in workers:
    worker.start()
os.write(ready_fd, b"ready\n")
release.wait()
