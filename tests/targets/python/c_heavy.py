"""Target: Python spending its time in C, and C calling back into Python (a nested eval loop per call).

    <module> -> main -> json, re, zlib, and sorted(key=py_key), in turn, for argv[2] seconds

The pandas-free stand-in for the group-by job of issue 42: most samples are in C functions of the
interpreter and its extension modules, under the Python frame that called them; ``sorted`` enters the eval
loop again from C for each key.

argv[1]: readiness fd, or "-" for none (a command nprof starts); argv[2]: seconds to run.
"""

import json
import os
import re
import sys
import time
import zlib

TEXT = " ".join(f"word{i} {i * 7919 % 1000}" for i in range(3000))
WORDS = re.compile(r"(\w+?)(\d+)")
ITEMS = [(i * 7919) % 10007 for i in range(4000)]
RECORDS = [{"id": i, "name": f"n{i}", "tags": ["a", "b", str(i)]} for i in range(1500)]


def py_key(x):
    return -x


def main(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        json.loads(json.dumps(RECORDS))
        WORDS.findall(TEXT)
        zlib.decompress(zlib.compress(TEXT.encode(), 6))
        sorted(ITEMS, key=py_key)


if sys.argv[1] != "-":
    os.write(int(sys.argv[1]), b"ready\n")
main(float(sys.argv[2]))
