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


def main(ready_fd):
    alive = []
    started = 0
    while True:
        if len(alive) == 6:
            alive.pop(0).join()
        thread = threading.Thread(target=brief_work)
        thread.start()
        alive.append(thread)
        started += 1
        if started == 12:
            os.write(ready_fd, b"ready\n")


if __name__ == "__main__":
    main(int(sys.argv[1]))
