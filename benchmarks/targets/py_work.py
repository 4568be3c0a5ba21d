"""Benchmark target: a fixed amount of Python work, timed by the target itself.

    chain mode:   main -> outer -> middle -> inner (a pure-Python hot loop), one thread
    threads mode: 4 CPU-bound threads with their own chains, 2 sleeping, 2 blocked on a lock

argv[1]: readiness fd; argv[2]: mode; argv[3]: units of work (each ~10 ms unprofiled).
After "ready" it waits for one byte on stdin (the profiler is attached by then), does the work, prints
{"elapsed": seconds} on stdout and exits.
"""

import json
import os
import sys
import threading
import time


def inner(n):
    x = 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2147483648
    return x


def middle(n):
    return inner(n)


def outer(n):
    return middle(n)


def unit():
    return outer(25_000)


def worker(units):
    for _ in range(units):
        unit()


def main():
    ready, mode, units = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    idle = []
    if mode == "threads":
        lock = threading.Lock()
        lock.acquire()
        idle = [threading.Thread(target=time.sleep, args=(3600,), daemon=True) for _ in range(2)]
        idle += [threading.Thread(target=lock.acquire, daemon=True) for _ in range(2)]
        for t in idle:
            t.start()
    os.write(ready, b"ready\n")
    sys.stdin.buffer.read(1)
    start = time.perf_counter()
    if mode == "threads":
        workers = [threading.Thread(target=worker, args=(units // 4,)) for _ in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    else:
        worker(units)
    print(json.dumps({"elapsed": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
