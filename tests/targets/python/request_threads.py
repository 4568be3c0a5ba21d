"""Target: a thread per request, as ``socketserver.ThreadingMixIn`` serves them: each thread computes in
``handle`` for about a millisecond and exits, three at a time. A thread is often gone a millisecond after
a sampler first sees it.

argv[1]: file descriptor to write "ready\n" to once the first requests are served. Runs until killed.
"""

import json
import sys

from brief_threads import run_threads


def render(n):
    return json.dumps({"items": [{"i": i, "s": str(i) * 3} for i in range(n)]})


def handle():
    for _ in range(4):
        render(100)


if __name__ == "__main__":
    run_threads(handle, 3, int(sys.argv[1]), 20)
