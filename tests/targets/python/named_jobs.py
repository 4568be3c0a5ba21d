"""Target: named threads one after another, each busy for ``seconds`` and joined before the next starts, so
each new thread takes over the last one's stack and pthread_t (glibc's stack cache), which is its
``threading.get_ident()`` too.

argv[1]: how many jobs; argv[2]: seconds each. Exits after the last one.
"""

import sys
import threading
import time


def job(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # at:job
        pass


if __name__ == "__main__":
    idents = []
    for i in range(int(sys.argv[1])):
        thread = threading.Thread(target=job, args=(float(sys.argv[2]),), name=f"job-{i}")
        thread.start()
        idents.append(thread.ident)
        thread.join()
    print(len(set(idents)), "distinct idents", flush=True)
