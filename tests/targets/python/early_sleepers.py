"""Target: starts SLEEPERS threads at once, at its first statement, each asleep at once in ``rest`` (an
Event's wait), then two busy threads, and exits after SECONDS.

argv[1]: SLEEPERS. argv[2]: SECONDS.
Run under ``nprof record -- python early_sleepers.py ...``: the sleepers start while nprof is still
looking for the interpreter in the fresh process, so their first samples have native frames only.
"""

import sys
import threading
import time


def rest(event):
    event.wait()  # at:rest


def spin(n):
    total = 0
    while True:
        for i in range(n):
            total += i * i


def main():
    event = threading.Event()
    for _ in range(int(sys.argv[1])):
        threading.Thread(target=rest, args=(event,), daemon=True).start()
    for n in (1000, 1001):
        threading.Thread(target=spin, args=(n,), daemon=True).start()
    time.sleep(float(sys.argv[2]))


main()
