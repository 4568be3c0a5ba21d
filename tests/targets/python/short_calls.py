"""Target: a loop that makes 50 calls of ``tiny``, each a few microseconds, then one long call of ``big``.

argv[1]: file descriptor to write "ready\n" to once the loop runs.
``tiny`` runs one ninth of the loop iterations (50 x 10 of 4,500), and 4-5% (3.12, 3.13) to 9-12% (the
others; py-spy finds the same) of the samples land in it, but each call returns long before its thread could
be stopped a second time: a function nprof must decode from a stop that runs it, met in such short calls only.
"""

import os
import sys


def tiny(n):
    total = 0
    for i in range(n):
        total += i
    return total


def big(n):
    total = 0
    for i in range(n):
        total += i
    return total


def main(ready_fd):
    os.write(ready_fd, b"ready\n")
    while True:
        for _ in range(50):
            tiny(10)
        big(4000)


if __name__ == "__main__":
    main(int(sys.argv[1]))
