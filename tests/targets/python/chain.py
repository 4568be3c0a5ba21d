"""Target: a CPU-bound pure-Python chain main -> outer -> middle [-> descend x N] -> inner, hot line in inner.

argv[1]: file descriptor to write "ready\n" to once the hot loop runs.
argv[2]: optional extra depth N (default 0): ``descend`` frames between ``middle`` and ``inner``, to make
the stack as deep as a measurement needs.
``inner`` runs ~50 ms per call, so its frame is pushed and popped again and again while nearly every sample
lands on its hot line.
"""

import os
import sys


def inner(rounds):
    x = 1
    for _ in range(rounds):  # at:loop
        x = (x * 1103515245 + 12345) % 2147483648 ^ (x >> 3) + (x << 1) % 65537 - (x & 255) * 3  # at:hot
    return x


def descend(depth, rounds):
    if depth > 0:
        return descend(depth - 1, rounds)  # at:descend
    return inner(rounds)  # at:descend-leaf


def middle(depth, ready_fd):
    rounds = 50_000
    while True:
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            ready_fd = None
        descend(depth, rounds) if depth else inner(rounds)  # at:middle


def outer(depth, ready_fd):
    middle(depth, ready_fd)  # at:outer


def main():
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    outer(depth, int(sys.argv[1]))  # at:main


if __name__ == "__main__":
    main()  # at:module
