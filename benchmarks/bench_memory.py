"""Benchmark: nprof's memory while it records a program that keeps taking new call paths.

A recording's prefix tree gains nodes for as long as the program takes stacks not seen before, so what a
node costs is what a long recording costs. The target (``benchmarks/c/random_paths.c``, built here) has
``--threads`` threads calling through a random graph of 50 functions; ``nprof record --pid PID -r RATE -d
SECONDS -f nprof`` from each ``--tree`` (a checkout, to compare commits) records it, one recording per tree
and repetition, interleaved. The nprof process's resident memory (VmRSS) is read every second; its peak
(VmHWM) at exit includes the rendering of the summary. The session's tree nodes are counted after.

Writes benchmarks/results/memory.json and prints a Markdown table.

usage: python -m benchmarks.bench_memory [--reps 1] [--seconds 60] [--rate 1000] [--tree PATH ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks import checkouts  # noqa: E402
from benchmarks.results import RESULTS, spread, write_rows  # noqa: E402
from profiler.profile.session import Session  # noqa: E402

#: seconds into the recording at which the table reports resident memory (the last: its end)
MARKS = (5, 30)


def status_kib(pid: int, field: str) -> int | None:
    """A ``/proc/PID/status`` field in kB (proc(5)); None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return None


def record(tree: str, target: str, threads: int, rate: float, seconds: float, out: str) -> dict:
    """One recording from ``tree``: VmRSS each second (MiB), VmHWM at the end, and the tree's nodes."""
    r, w = os.pipe()
    prog = subprocess.Popen([target, str(w), str(threads)], pass_fds=[w])
    os.close(w)
    try:
        if os.read(r, 6) != b"ready\n":
            raise RuntimeError("the target did not start")
        argv = [sys.executable, "-m", "profiler", "record", "--pid", str(prog.pid), "-r", str(rate),
                "-d", str(seconds), "-o", out]  # fmt: skip
        nprof = subprocess.Popen(argv, **checkouts.run_in(tree),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        start, rss, hwm = time.monotonic(), [], None
        while nprof.poll() is None:
            kib, peak = status_kib(nprof.pid, "VmRSS"), status_kib(nprof.pid, "VmHWM")
            if kib is not None:
                rss.append((time.monotonic() - start, kib / 1024))
                hwm = peak
            time.sleep(1.0)
        _, err = nprof.communicate()
        if nprof.returncode != 0:
            raise RuntimeError(f"nprof record from {tree} failed: {err[-2000:]}")
    finally:
        os.close(r)
        prog.kill()
        prog.wait()
    nodes = len(Session.load(out).stacks)
    sampling = [m for t, m in rss if t <= seconds]  # the end: the last reading before rendering started
    row = {"tree": tree, "nodes": nodes, "rss_mib": rss, "end_mib": sampling[-1], "peak_mib": (hwm or 0) / 1024}
    for mark in MARKS:
        row[f"at_{mark}s_mib"] = next((m for t, m in rss if t >= mark), sampling[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--threads", type=int, default=4)
    checkouts.add_argument(parser)
    args = parser.parse_args()
    trees = checkouts.trees(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="nprof-bench-memory-") as tmp:
        target = os.path.join(tmp, "random_paths")
        subprocess.run(["gcc", "-O2", "-pthread", "-o", target, os.path.join(HERE, "c", "random_paths.c")],
                       check=True)  # fmt: skip
        for rep in range(args.reps):
            for tree in trees:  # interleaved, so the machine's hour weighs on each alike
                row = record(tree, target, args.threads, args.rate, args.seconds, os.path.join(tmp, "s.nprof"))
                row["rep"] = rep
                rows.append(row)
                print(f"{os.path.basename(tree)}: {row['nodes']} nodes, {row['end_mib']:.0f} MiB at the end of "
                      f"sampling, peak {row['peak_mib']:.0f} MiB", flush=True)  # fmt: skip
    write_rows(os.path.join(RESULTS, "memory.json"), rows)
    heads = [f"MiB at {m} s" for m in MARKS] + [f"MiB at {args.seconds:.0f} s", "peak MiB"]
    print("\n| tree | tree nodes | " + " | ".join(heads) + " |\n|---|---|" + "---|" * len(heads))
    for tree in trees:
        mine = [r for r in rows if r["tree"] == tree]
        cells = [spread([r[f"at_{m}s_mib"] for r in mine]) for m in MARKS]
        cells += [spread([r["end_mib"] for r in mine]), spread([r["peak_mib"] for r in mine])]
        nodes = f"{statistics.median(r['nodes'] for r in mine):,.0f}"
        print(f"| {os.path.basename(tree)} | {nodes} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
