"""Target: a recursion DEPTH frames deep (``descend``) that stays there, spinning in ``bottom``.

argv[1]: file descriptor to write "ready\n" to once the bottom is reached.
argv[2]: DEPTH. The recursion limit is raised to fit it.
Unlike chain.py's descent, rebuilt every 50 ms, this chain never changes: every sample should hold all of
it, copied by the thread's read plan in one stop.
"""

import os
import sys


def bottom(ready_fd):
    os.write(ready_fd, b"ready\n")
    x = 1
    while True:
        x = (x * 1103515245 + 12345) % 2147483648  # at:hot


def descend(depth, ready_fd):
    if depth > 0:
        return descend(depth - 1, ready_fd)
    return bottom(ready_fd)


def main():
    depth = int(sys.argv[2])
    sys.setrecursionlimit(max(sys.getrecursionlimit(), depth + 100))
    descend(depth, int(sys.argv[1]))


if __name__ == "__main__":
    main()
