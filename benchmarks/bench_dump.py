"""Benchmark: ``nprof dump``, what it costs the process it snapshots and the user who runs it.

``nprof dump --pid P --json`` on CPython 3.12 processes with 1, 20 and 100 threads asleep, and on a hung
C program (tests/targets/stuck.c: a vfork parent in uninterruptible sleep, beside a spinning thread):

* held: how long every thread was held, from the first stop to the last resume (dump's ``held_ms``);
* wall: the whole command, start-up and symbolization included.

Medians over ``--reps`` dumps of each target, interleaved. Results in docs/benchmarks.md.

usage: python -m benchmarks.bench_dump [--reps 5] [--interpreter PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from benchmarks.bench_python import DEFAULT_INTERPRETER
from benchmarks.results import RESULTS, write_rows
from profiler.target import procfs

HERE = os.path.dirname(os.path.abspath(__file__))
SLEEPERS = os.path.join(HERE, "targets", "py_sleepers.py")
STUCK = os.path.join(HERE, "..", "tests", "targets", "stuck.c")
THREAD_COUNTS = (1, 20, 100)


@contextmanager
def running(argv: list[str], pass_fds: Sequence[int] = ()) -> Iterator[subprocess.Popen]:
    """Start ``argv``, which holds "FD" where the target expects its readiness pipe (as in bench_cfi), and
    yield once it wrote "ready". ``pass_fds``: more descriptors it inherits (named in ``argv``)."""
    r, w = os.pipe()
    proc = subprocess.Popen([str(w) if a == "FD" else a for a in argv], pass_fds=[w, *pass_fds])
    os.close(w)
    try:
        if not os.read(r, 16):
            raise RuntimeError(f"{argv} exited before it was ready")
        yield proc
    finally:
        os.close(r)
        proc.kill()
        proc.wait()


def wait_for_disk_sleep(pid: int, timeout: float = 10.0) -> None:
    """Poll until ``pid`` is in uninterruptible sleep: stuck.c's child says it is ready from inside vfork,
    a moment before its parent's wait shows as state D."""
    deadline = time.monotonic() + timeout
    while (status := procfs.read_status(pid)) is None or status.state != "D":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{pid} never entered uninterruptible sleep")
        time.sleep(0.01)


def dump_once(pid: int) -> dict:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "profiler", "dump", "--pid", str(pid), "--json"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    wall = time.monotonic() - start
    return {"held_ms": json.loads(result.stdout)["held_ms"], "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--interpreter", default=DEFAULT_INTERPRETER)
    p.add_argument("--out", default=os.path.join(RESULTS, "dump.json"))
    args = p.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as build_dir:
        stuck = os.path.join(build_dir, "stuck")
        subprocess.run(["gcc", "-O2", "-pthread", "-o", stuck, STUCK], check=True)
        for rep in range(args.reps):
            for count in THREAD_COUNTS:
                with running([args.interpreter, SLEEPERS, "FD", str(count)]) as target:
                    rows.append({"rep": rep, "target": f"{count} sleeping threads", **dump_once(target.pid)})
            with running([stuck, "FD"]) as target:
                wait_for_disk_sleep(target.pid)
                children = procfs.read_text(f"/proc/{target.pid}/task/{target.pid}/children") or ""
                try:
                    rows.append({"rep": rep, "target": "hung (one thread in D)", **dump_once(target.pid)})
                finally:
                    for child in children.split():
                        os.kill(int(child), 9)
    write_rows(args.out, rows)
    print("| target | held ms | wall s |\n|---|---|---|")
    for name in dict.fromkeys(r["target"] for r in rows):
        picked = [r for r in rows if r["target"] == name]
        held = statistics.median(r["held_ms"] for r in picked)
        wall = statistics.median(r["wall_s"] for r in picked)
        print(f"| {name} | {held:.1f} | {wall:.2f} |")


if __name__ == "__main__":
    main()
