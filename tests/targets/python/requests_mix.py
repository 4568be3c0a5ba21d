"""Target: two threads serving a random mix of nine kinds of request, each its own call path through the
standard library (urllib.parse, html, re and collections, dataclasses and decimal, datetime, textwrap,
json, sorted with a key, a generator), as a web application's workers do.

argv[1]: file descriptor to write "ready\n" to once both threads serve.
A thread's stack changes from one sample to the next between paths it has run before, so its read plan
keeps meeting code objects it did not hold at its last capture, most of them long known to the profiler.
Runs until killed.
"""

import dataclasses
import datetime
import decimal
import html
import json
import os
import random
import re
import sys
import textwrap
import threading
import urllib.parse
from collections import Counter

TEXT = "the quick brown fox jumps over the lazy dog " * 20


@dataclasses.dataclass
class Order:
    id: int
    items: list
    total: decimal.Decimal


def parse_query(query):
    return dict(urllib.parse.parse_qsl(query))


def render(rows):
    return "".join(f"<tr><td>{html.escape(str(row))}</td></tr>" for row in rows)


def words(text):
    return Counter(re.findall(r"\w+", text)).most_common(5)


def orders(n):
    made = [Order(i, list(range(i % 7)), decimal.Decimal(i) / 7) for i in range(n)]
    return sum(order.total for order in made)


def dates(n):
    return [(datetime.date(2020, 1, 1) + datetime.timedelta(days=i)).isoformat() for i in range(n)]


def wrap(text):
    return textwrap.fill(text, 40)


def roundtrip(obj):
    return json.loads(json.dumps(obj))


def sort_keyed(n):
    return sorted(range(n), key=lambda x: (x * 7919) % 101)


def gen_sum(n):
    return sum(x * x for x in range(n) if x % 3)


HANDLERS = [
    lambda: parse_query("a=1&b=2&c=" + "x" * 50),
    lambda: render(range(40)),
    lambda: words(TEXT),
    lambda: orders(60),
    lambda: dates(50),
    lambda: wrap(TEXT),
    lambda: roundtrip({"a": list(range(60)), "b": {"c": "d" * 20}}),
    lambda: sort_keyed(300),
    lambda: gen_sum(2000),
]


def handle(kind):
    return HANDLERS[kind]()


def serve(seed, started):
    rnd = random.Random(seed)
    started.release()
    while True:
        handle(rnd.randrange(len(HANDLERS)))


def main(ready_fd):
    started = threading.Semaphore(0)
    for seed in range(2):
        threading.Thread(target=serve, args=(seed, started), daemon=True).start()
    for _ in range(2):
        started.acquire()
    os.write(ready_fd, b"ready\n")
    threading.Event().wait()


if __name__ == "__main__":
    main(int(sys.argv[1]))
