"""Target: Python called from C, blocked forever in os.read on a pipe nobody writes to.

<module> -> main -> outer -> sorted (C) -> middle (the key function) -> Box() (a class call, which 3.13
specializes with a frame of its own under ``__init__``, once it has run often) -> Box.__init__, blocked.

argv[1]: file descriptor to write "ready\\n" to, just before blocking. Each function has a local naming it,
which ``nprof dump --locals`` must show under that function's frame.
"""

import os
import sys


class Box:
    def __init__(self, ready_fd):
        init_local = "in-init"
        if ready_fd < 0:
            return
        read_end, _write_end = os.pipe()
        os.write(ready_fd, b"ready\n")
        os.read(read_end, 1)  # at:init


def middle(ready_fd):
    middle_local = "in-middle"
    return Box(ready_fd) if middle_local else None  # at:middle


def outer(ready_fd):
    outer_local = "in-outer"
    return sorted([ready_fd], key=middle if outer_local else None)  # at:outer


def main():
    for _ in range(1000):  # warm up: 3.13 specializes the class call after a few runs
        middle(-1)
    outer(int(sys.argv[1]))  # at:main


if __name__ == "__main__":
    main()  # at:module
