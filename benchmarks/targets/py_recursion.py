"""Benchmark target: a Python stack that changes between any two samples: a recursive fib(22) in a loop,
17 frames deep at the median and 24 at most (recursion depth 1-22 under <module> and main).

argv[1]: file descriptor to write "ready\\n" to once the loop runs.
"""

import os
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def main(ready_fd):
    fib(5)
    os.write(ready_fd, b"ready\n")
    os.close(ready_fd)
    while True:
        fib(22)


main(int(sys.argv[1]))
