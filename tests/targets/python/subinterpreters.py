"""Target: a main thread that created a subinterpreter once and spins in ``main_spin``, and a thread
``worker`` whose ``run_sub`` runs code in another subinterpreter, which spins in ``in_subinterp``.

argv[1]: file descriptor to write "ready\n" to once both spin.
Exits with status 3 when the interpreter has no subinterpreter module (``_xxsubinterpreters`` 3.8-3.12,
``_interpreters`` 3.13). The created subinterpreter keeps a thread state bound to the main thread, its
chain empty; the worker has a state in each of two interpreters, both holding frames. Both loops sleep
briefly every 2000 iterations: up to 3.11 the interpreters share one GIL, and a thread waiting for it asks
its own interpreter's holder to drop it, so a loop that never sleeps starves the other. Runs until killed.
"""

import os
import sys
import threading
import time

try:
    import _interpreters as interpreters
except ImportError:
    try:
        import _xxsubinterpreters as interpreters
    except ImportError:
        sys.exit(3)

SUB_CODE = """
import os, time
def in_subinterp():
    x = 1
    os.write(READY_FD, b"sub\\n")
    while True:
        for _ in range(2000):
            x = (x * 1103515245 + 12345) % 2147483648
        time.sleep(0.0002)
in_subinterp()
"""


def run_sub(ready_w):
    sub = interpreters.create()
    interpreters.run_string(sub, f"READY_FD = {ready_w}\n" + SUB_CODE)


def main_spin(ready_fd):
    os.write(ready_fd, b"ready\n")
    x = 1
    while True:
        for _ in range(2000):
            x = (x * 1103515245 + 12345) % 2147483648
        time.sleep(0.0002)


def main(ready_fd):
    interpreters.run_string(interpreters.create(), "x = 1")
    r, w = os.pipe()
    threading.Thread(target=run_sub, args=(w,), name="worker", daemon=True).start()
    os.read(r, 4)  # the worker's subinterpreter spins
    main_spin(ready_fd)


if __name__ == "__main__":
    main(int(sys.argv[1]))
