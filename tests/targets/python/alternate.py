"""Target: a loop that alternates between two call paths of different depth, as a program alternating
between two library calls does (json.dumps then json.loads).

argv[1]: file descriptor to write "ready\n" to once the loop runs.
``shallow`` spins ~2 ms in one frame; ``deep`` spins ~2 ms eight frames down, each frame running its own
code object. A sample lands in one path or the other, and a read plan has to serve both.
"""

import os
import sys
import time


def spin():
    end = time.perf_counter() + 0.002
    while time.perf_counter() < end:
        pass


def shallow():
    spin()


def d8():
    spin()


def d7():
    d8()


def d6():
    d7()


def d5():
    d6()


def d4():
    d5()


def d3():
    d4()


def d2():
    d3()


def deep():
    d2()


def main(ready_fd):
    os.write(ready_fd, b"ready\n")
    while True:
        shallow()
        deep()


if __name__ == "__main__":
    main(int(sys.argv[1]))
