"""Target: the json loop of issue 42, whose Python frames were put below its native leaf in spawn mode.

    <module> -> main -> json.loads(json.dumps(data)) over 2,000 small dicts, for argv[2] seconds

argv[1]: readiness fd, or "-" for none (a command nprof starts); argv[2]: seconds to run.
"""

import json
import os
import sys
import time

DATA = [{"a": i, "b": str(i), "c": [i, i + 1]} for i in range(2000)]


def main(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        json.loads(json.dumps(DATA))


if sys.argv[1] != "-":
    os.write(int(sys.argv[1]), b"ready\n")
main(float(sys.argv[2]))
