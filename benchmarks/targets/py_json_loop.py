"""Benchmark target: a program run under a profiler (``record -- python ...``) that ends by itself, for the
time from its exit to the profiler's: json.dumps and json.loads over 2,000 small dicts, in a loop, for a
given number of seconds.

usage: python py_json_loop.py SECONDS PATH
PATH gets this process's pid at its start and, as a second line, ``time.monotonic()`` just before it
exits: CLOCK_MONOTONIC is one clock for every process on the machine, and no clock step moves it.
"""

import json
import os
import sys
import time

RECORDS = [{"id": i, "name": f"item-{i}", "price": i * 0.5, "tags": ["a", "b"]} for i in range(2_000)]


def main():
    seconds, path = float(sys.argv[1]), sys.argv[2]
    with open(path, "w") as f:
        f.write(f"{os.getpid()}\n")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        json.loads(json.dumps(RECORDS))
    with open(path, "a") as f:
        f.write(f"{time.monotonic()!r}\n")


main()
