"""Target: threads taking turns at the GIL. Four threads run pure-Python work (``spin``), and 16 more wake
every millisecond to do a little (``ping``): each wake takes the GIL from a spinner and each sleep hands it
back, as the request threads of a web server do around their socket calls.

argv[1]: file descriptor to write "ready\n" to once every thread runs.
"""

import os
import sys
import threading
import time

SPINNERS = 4
PINGERS = 16


def spin(started):
    started.release()
    x = 0
    while True:
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


def ping(started):
    started.release()
    count = 0
    while True:
        time.sleep(0.001)  # releases the GIL (PyEval_SaveThread), then takes it back
        count += 1


def main():
    started = threading.Semaphore(0)
    for target in [spin] * SPINNERS + [ping] * PINGERS:
        threading.Thread(target=target, args=(started,), daemon=True).start()
    for _ in range(SPINNERS + PINGERS):
        started.acquire()
    os.write(int(sys.argv[1]), b"ready\n")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
