"""Benchmark: what sleeping threads cost nprof, per second of recording.

The target is tests/targets/dormant.c left alone: N threads asleep on a pipe, one asleep on its go fd, and
its main thread in ``pause()``. Each row records it twice with ``nprof record --pid P -r RATE``, for
``SHORT`` and ``LONG`` seconds, and takes nprof's CPU time (user + system, from ``wait4``) of each: the
difference over the difference in seconds is what a second of recording costs, without nprof's start-up
and end, which are the same in both. ``--tree`` compares checkouts (a worktree of an older commit, say) in
the same run, interleaved, as ``PYTHONPATH=TREE python3 -P -m profiler``.

usage: python -m benchmarks.bench_sleepers [--reps 2] [--tree PATH ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks import checkouts
from benchmarks.bench_dump import running
from benchmarks.results import RESULTS, write_rows

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGET = os.path.join(REPO, "tests", "targets", "dormant.c")
THREAD_COUNTS = (0, 200, 2000)  #: threads asleep besides the worker and main
RATES = (100, 1000)
SHORT, LONG = 2.0, 8.0  #: seconds recorded: LONG - SHORT is what the row measures


@contextmanager
def sleeping_target(binary: str, sleepers: int) -> Iterator[int]:
    """dormant.c with ``sleepers`` threads, its worker never told to work; yields its pid once ready."""
    go_r, go_w = os.pipe()
    try:
        with running([binary, "FD", str(go_r), str(sleepers)], pass_fds=[go_r]) as proc:
            yield proc.pid
    finally:
        os.close(go_r)
        os.close(go_w)


def nprof_cpu(tree: str, pid: int, rate: int, seconds: float) -> float:
    """nprof's CPU time (s) for one recording of ``pid``, from ``tree``."""
    with tempfile.TemporaryDirectory() as out, open(os.path.join(out, "stderr"), "w+") as err:
        argv = [sys.executable, "-P", "-m", "profiler", "record", "--pid", str(pid), "-r", str(rate),
                "-d", str(seconds), "-f", "nprof", "-o", os.path.join(out, "s.nprof")]  # fmt: skip
        proc = subprocess.Popen(argv, **checkouts.run_in(tree), stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)  # (its own CPU time; Popen.wait would not give it)
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise RuntimeError(f"nprof from {tree} failed: {err.read()}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    checkouts.add_argument(parser)
    args = parser.parse_args()
    trees = checkouts.trees(args)
    rows = []
    with tempfile.TemporaryDirectory() as build:
        binary = os.path.join(build, "dormant")
        subprocess.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-pthread", "-o", binary, TARGET], check=True)
        for sleepers in THREAD_COUNTS:
            with sleeping_target(binary, sleepers) as pid:
                for rate in RATES:
                    for rep in range(args.reps):
                        for tree in trees:  # interleaved, so the machine's hour weighs on each alike
                            short = nprof_cpu(tree, pid, rate, SHORT)
                            long = nprof_cpu(tree, pid, rate, LONG)
                            rows.append({"tree": tree, "sleepers": sleepers, "rate": rate, "rep": rep,
                                         "cpu_short": short, "cpu_long": long,
                                         "cpu_per_second": (long - short) / (LONG - SHORT)})  # fmt: skip
                            print(f"{os.path.basename(tree)} {sleepers:5d} threads asleep {rate:5d} Hz: "
                                  f"{rows[-1]['cpu_per_second']:.3f} s of CPU per second", flush=True)
    write_rows(os.path.join(RESULTS, "sleepers.json"), rows)
    print("\n| tree | threads asleep | rate | nprof CPU per second recorded (median) |\n|---|---|---|---|")
    for tree in trees:
        for sleepers in THREAD_COUNTS:
            for rate in RATES:
                values = [r["cpu_per_second"] for r in rows
                          if (r["tree"], r["sleepers"], r["rate"]) == (tree, sleepers, rate)]  # fmt: skip
                print(f"| {os.path.basename(tree)} | {sleepers + 2} | {rate} Hz | {statistics.median(values):.3f} |")


if __name__ == "__main__":
    main()
