"""Target: Python calling C calling back into Python, through ctypes.

    qsort mode:  main -> py_caller -> [ctypes/libffi] -> libc qsort -> ... -> [libffi closure] -> py_comparator
    lib mode:    main -> py_caller -> [ctypes/libffi] -> c_iterate -> c_dispatch -> [closure] -> py_callback
    sorted mode: main -> py_caller -> builtin sorted -> the key lambda, a call into Python per item

argv[1]: readiness fd; argv[2]: "qsort", "lib" or "sorted"; argv[3]: path of callback_lib.so (lib mode).
The qsort and lib callbacks spin a little, so most samples land inside them (the hot lines are marked); the
sorted key does nearly nothing, so many samples land in the interpreter entering and leaving it.
"""

import ctypes
import os
import sys

CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)


def py_comparator(a, b):
    x = 0
    for i in range(300):
        x += i  # at:comparator
    return a[0] - b[0]


def py_callback(i):
    x = 0
    for j in range(300):
        x += j  # at:callback
    return i & 1


def py_caller(mode, lib):
    if mode == "qsort":
        libc = ctypes.CDLL(None)
        values = (ctypes.c_int * 512)(*[(i * 7919) % 1009 for i in range(512)])
        libc.qsort(values, len(values), ctypes.sizeof(ctypes.c_int), CMP(py_comparator))  # at:qsort
    elif mode == "sorted":
        for _ in range(50):
            sorted(range(200), key=lambda x: -x)  # at:sorted
    else:
        lib.c_iterate(CALLBACK(py_callback), 200)  # at:iterate


def main():
    ready_fd = int(sys.argv[1])
    mode = sys.argv[2]
    lib = ctypes.CDLL(sys.argv[3]) if mode == "lib" else None
    py_caller(mode, lib)
    os.write(ready_fd, b"ready\n")
    while True:
        py_caller(mode, lib)


if __name__ == "__main__":
    main()
