"""Target: the main thread leaves with pthread_exit (through ctypes) while a thread it started runs on.

argv[1]: seconds the thread works in ``worker_loop`` before the process ends. The process's main thread is
then a zombie, whose id reads no memory any more (process_vm_readv: ESRCH).
"""

import ctypes
import sys
import threading
import time


def worker_loop(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))  # at:hot


def main():
    threading.Thread(target=worker_loop, args=(float(sys.argv[1]),)).start()
    ctypes.CDLL(None).pthread_exit(None)  # no return: Python never finalizes; the worker ends the process


main()
