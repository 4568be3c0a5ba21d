"""Target: a tree of Python processes whose threads the program names, for ``nprof dump --subprocesses`` and
for thread names in every output (issue 44).

argv[1]: file descriptor to write "ready\n" to once every process of the tree runs its threads; argv[2]: how
many generations of children below this process (0: none). Each process runs a thread named
``payer-<generation>`` that spins in ``pay`` (its hot line is marked), and starts its child (the same
script, one generation down, its ready fd a pipe of its own) from its main thread, which then sleeps.
A child is killed when its parent dies (``PR_SET_PDEATHSIG``), so the test's end of the first ends them all.
The first process also runs a thread named ``labelled`` that gives itself a kernel name of its own
(``prctl(PR_SET_NAME)``, as ``pthread_setname_np`` does), ``os-label``, and sleeps.
"""

import ctypes
import os
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15  # linux/prctl.h
generation = int(os.environ.get("FAMILY_GENERATION", "0"))


def pay():
    total = 0
    while True:
        for i in range(1000):
            total += i * i  # at:pay


def labelled(named):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, b"os-label", 0, 0, 0)
    named.set()
    while True:
        time.sleep(3600)


def main():
    ready_fd, below = int(sys.argv[1]), int(sys.argv[2])
    if generation > 0:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL
        if os.getppid() != int(os.environ["FAMILY_PARENT"]):  # the parent died before that
            sys.exit(1)
    threading.Thread(target=pay, name=f"payer-{generation}", daemon=True).start()
    if generation == 0:
        named = threading.Event()
        threading.Thread(target=labelled, args=(named,), name="labelled", daemon=True).start()
        named.wait()
    if below > 0:
        r, w = os.pipe()
        env = dict(os.environ, FAMILY_GENERATION=str(generation + 1), FAMILY_PARENT=str(os.getpid()))
        child = subprocess.Popen([sys.executable, __file__, str(w), str(below - 1)], pass_fds=[w], env=env)
        os.close(w)
        said = b""
        while b"ready\n" not in said:
            chunk = os.read(r, 64)
            if not chunk:
                sys.exit(f"the child of generation {generation + 1} exited before it was ready")
            said += chunk
    os.write(ready_fd, b"ready\n")
    while True:
        time.sleep(3600)  # at:wait


if __name__ == "__main__":
    main()
