"""Target: two threads deadlocked on two locks, each blocked in ``lock.acquire`` for ever.

    first:  holds a, waits for b        second: holds b, waits for a

argv[1]: readiness fd, written once both threads hold their first lock and are about to wait for the other.
"""

import os
import sys
import threading

a, b = threading.Lock(), threading.Lock()
both = threading.Barrier(3)


def first():
    with a:
        both.wait()
        with b:  # at:first
            pass


def second():
    with b:
        both.wait()
        with a:  # at:second
            pass


threads = [threading.Thread(target=f, name=f.__name__, daemon=True) for f in (first, second)]
for t in threads:
    t.start()
both.wait()
os.write(int(sys.argv[1]), b"ready\n")
for t in threads:
    t.join()
