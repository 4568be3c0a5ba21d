"""Target: thread churn as a program making a ThreadPoolExecutor per batch of work does it: 6 threads live for
one batch of 60 jobs (~15 ms), then the next pool's threads replace them. New threads get new tids (the key
of 3.11+), and on <=3.10 often an exited thread's pthread handle (glibc reuses its cached stack).

argv[1]: file descriptor to write "ready\n" to once the first batch is done.
``job`` computes for a while and sleeps 1 ms.
"""

import concurrent.futures
import hashlib
import json
import os
import sys
import time


def job(i):
    digest = hashlib.sha256()
    for _ in range(200):
        digest.update(json.dumps({"i": i}).encode())
    time.sleep(0.001)
    return digest.hexdigest()


def batch():
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(job, range(60)))


def main(ready_fd):
    batch()
    os.write(ready_fd, b"ready\n")
    while True:
        batch()


if __name__ == "__main__":
    main(int(sys.argv[1]))
