"""Target: a program whose time goes to the cyclic garbage collector: it keeps ~200k container objects alive
(each full collection walks them all) and calls ``gc.collect()`` in a loop, making a few cycles between.

argv[1]: file descriptor to write "ready\n" to once the loop runs.
"""

import gc
import os
import sys


def make_cycles(n):
    for _ in range(n):
        a = []
        a.append(a)


def collect_forever(ready_fd):
    kept = [[i] for i in range(200_000)]  # containers every full collection traverses
    while True:
        make_cycles(100)
        gc.collect()  # at:collect
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            ready_fd = None
    return kept


if __name__ == "__main__":
    collect_forever(int(sys.argv[1]))
