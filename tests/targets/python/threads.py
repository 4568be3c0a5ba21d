"""Target: 8 named threads. 4 CPU-bound with distinct chains, 2 sleeping, 2 blocked on a lock.

argv[1]: file descriptor to write "ready\n" to once every thread has reached its steady state.
Thread ``cpu-K`` runs ``worker_K -> step_K -> spin`` (K = 0..3); the hot line of ``spin`` is marked.
``sleep-K`` sleeps in ``sleeper`` and ``lock-K`` waits for a lock in ``blocked``.
"""

import os
import sys
import threading
import time

lock = threading.Lock()
running = {}


def spin(n):
    total = 0
    for i in range(n):
        total += i * i  # at:spin
    return total


def step_0():
    return spin(2000)


def step_1():
    return spin(2000)


def step_2():
    return spin(2000)


def step_3():
    return spin(2000)


def worker(step):
    running[threading.current_thread().name].set()
    while True:
        step()


def worker_0():
    worker(step_0)


def worker_1():
    worker(step_1)


def worker_2():
    worker(step_2)


def worker_3():
    worker(step_3)


def sleeper():
    running[threading.current_thread().name].set()
    while True:
        time.sleep(3600)  # at:sleep


def blocked():
    running[threading.current_thread().name].set()
    with lock:  # at:lock
        pass


def main():
    lock.acquire()
    targets = {f"cpu-{k}": w for k, w in enumerate([worker_0, worker_1, worker_2, worker_3])}
    targets.update({f"sleep-{k}": sleeper for k in range(2)})
    targets.update({f"lock-{k}": blocked for k in range(2)})
    for name, target in targets.items():
        running[name] = threading.Event()
        threading.Thread(target=target, name=name, daemon=True).start()
    for event in running.values():
        event.wait()
    os.write(int(sys.argv[1]), b"ready\n")
    while True:
        time.sleep(3600)  # at:main


if __name__ == "__main__":
    main()
