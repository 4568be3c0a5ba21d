"""Target: threads that live ~5 ms each, six at a time, each asleep in ``brief_work``: at any moment every
Python thread but the main one is younger than the time it takes a tool to attach (~10 ms here).

argv[1]: file descriptor to write "ready\n" to once the first threads have run. Runs until killed.
"""

import os
import sys
import threading
import time


def brief_work():
    time.sleep(0.005)  # at:brief


def run_threads(work, at_once, ready_fd, ready_after):
    """Start a thread running ``work`` whenever fewer than ``at_once`` run (the oldest is joined first), for
    ever; write "ready" once ``ready_after`` threads have started. (request_threads.py runs it too.)"""
    alive = []
    started = 0
    while True:
        if len(alive) == at_once:
            alive.pop(0).join()
        thread = threading.Thread(target=work)
        thread.start()
        alive.append(thread)
        started += 1
        if started == ready_after:
            os.write(ready_fd, b"ready\n")


if __name__ == "__main__":
    run_threads(brief_work, 6, int(sys.argv[1]), 12)
