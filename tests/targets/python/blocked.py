"""Target: main -> outer -> middle -> inner, blocked forever in os.read on a pipe nobody writes to.

argv[1]: file descriptor to write "ready\n" to, just before blocking (tests never sleep to synchronise).
Lines the tests check are marked with ``# at:<name>`` comments; they look the numbers up in this file.
The locals of ``inner`` are what ``nprof dump --locals`` must show.
"""

import os
import sys


class Opaque:
    pass


def inner(ready_fd, depth):
    text = "caf\xe9 \u20ac \U0001f40d"
    number = -1234567890123456789012345
    small = 42
    ratio = 2.5
    flag = True
    nothing = None
    items = [1, "two", 3.0, None]
    pair = (small, "x")
    table = {"a": 1, "b": [2, 3]}
    blob = b"\x00bytes"
    thing = Opaque()
    read_end, write_end = os.pipe()
    os.write(ready_fd, b"ready\n")
    return os.read(read_end, 1)  # at:inner


def middle(ready_fd):
    return inner(ready_fd, 3)  # at:middle


def outer(ready_fd):
    return middle(ready_fd)  # at:outer


def main():
    outer(int(sys.argv[1]))  # at:main


if __name__ == "__main__":
    main()  # at:module
