"""Target: one thread that computes in short bursts between sleeps, as a paced loop does.

    main -> cycle -> work (spins BUSY_US on time.perf_counter)
                  -> rest -> time.sleep(SLEEP_US)

argv[1]: file descriptor to write "ready\n" to before the first cycle; argv[2], argv[3]: BUSY_US, SLEEP_US.
It spends a little less than BUSY_US / (BUSY_US + SLEEP_US) of its time in ``work`` (each wake-up adds its
latency to the sleep).
"""

import os
import sys
import time


def work(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def rest(seconds):
    time.sleep(seconds)


def cycle(busy, sleep):
    while True:
        work(busy)
        rest(sleep)


def main():
    ready_fd, busy_us, sleep_us = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    cycle(busy_us / 1e6, sleep_us / 1e6)


main()
