"""Target: greenlets switching back and forth, each running a recursive ``fib`` between switches.

argv[1]: file descriptor to write "ready\n" to once the greenlets run. Every greenlet runs on its own part
of the C stack, above greenlet's ``g_initialstub``; the eval loops below it run the main greenlet's
``consumer_loop``, whose frames are not in a running greenlet's chain.
"""

import os
import sys

import greenlet


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def producer(parent):
    while True:
        parent.switch(fib(18))


def consumer_loop(ready_fd):
    me = greenlet.getcurrent()
    kids = [greenlet.greenlet(producer) for _ in range(10)]
    while True:
        for kid in kids:
            kid.switch(me)
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)
            ready_fd = None


consumer_loop(int(sys.argv[1]) if len(sys.argv) > 1 else None)
