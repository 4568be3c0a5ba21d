"""Benchmark: ``nprof report`` on a session of many distinct stacks, its wall time and peak memory per format.

What a long recording of a program taking many call paths costs once sampling is over: the same rendering
runs at the end of ``nprof record``. The session is made here, not recorded, so every run renders the same
one: ``--stacks`` distinct stacks of a C++-like program of ``--functions`` functions, each stack a random
path ``--depth`` frames deep on average (a recursion-free walk, as the soak target that first showed the
cost took: 335,000 distinct stacks, 28 frames deep on average, 2,762 frames, in 4 minutes at 1 kHz). Every
tenth frame has a call inlined at it, as DWARF names them. The session is saved once, then each format is
rendered by a fresh ``nprof report`` process per repetition, from each ``--tree`` (a checkout, to compare
commits: a worktree of an older one, say), interleaved. Each process reports its own peak RSS.

Writes benchmarks/results/report.json and prints a Markdown table.

usage: python -m benchmarks.bench_report [--reps 3] [--stacks 335000] [--tree PATH ...]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks import checkouts  # noqa: E402
from benchmarks.results import RESULTS, spread, write_rows  # noqa: E402
from profiler.model import FrameInfo, FrameKind, Module, SampleClass, StopReason  # noqa: E402
from profiler.profile.session import Session, SessionMeta  # noqa: E402

FORMATS = {"speedscope": "out.speedscope.json", "folded": "out.folded", "top table": None}
#: run in each report process: the command's own time and its peak RSS, from the kernel's high-water mark
#: of the process's memory (VmHWM, in kB; proc(5)). Not getrusage's ru_maxrss: Linux carries that across
#: execve, so every child reported the benchmark's own peak, made while it built the session.
CHILD = """
import sys, time
from profiler.cli.main import main
t = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - t
with open("/proc/self/status") as f:
    kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(seconds, kib, file=sys.stderr)
sys.exit(code)
"""


def make_session(path: str, stacks: int, functions: int, depth: int, seed: int = 1) -> tuple[int, int]:
    """Save a symbolized session of ``stacks`` distinct stacks; returns (distinct stacks, tree nodes)."""
    rng = random.Random(seed)
    session = Session(SessionMeta(pid=1, command=["synthetic"], rate=1000.0, duration=240.0))
    session.modules = [Module(id=0, path="/opt/synthetic/app", build_id=None, start=0, end=0, bias=0)]
    threads = [session.thread_index(1, tid, 1, f"worker-{tid}") for tid in range(1, 5)]
    frame = [(FrameKind.NATIVE, 0, 0x1000 + 0x40 * i, 0) for i in range(functions)]
    made: set[int] = set()
    while len(made) < stacks:
        n = max(2, int(rng.expovariate(1 / depth)))
        calls = [frame[0]] + [frame[rng.randrange(1, functions)] for _ in range(n - 1)]
        sid = session.intern_stack(tuple(reversed(calls)))  # leaf first, as the sampler interns them
        made.add(sid)
        session.add_sample(rng.choice(threads), sid, StopReason.END_OF_STACK, SampleClass.RUNNING, rng.randint(1, 3))
    session.counters["ticks"] = sum(session.samples.values())
    session.frame_info = [
        FrameInfo(f"ns::f{session.frames.key(fid)[2]:x}(int, unsigned long)", module="app")
        for fid in range(len(session.frames))
    ]
    session.inlined = {fid: [FrameInfo(f"inlined{fid}", file="app.cc", line=fid, inlined=True)]
                       for fid in range(0, len(session.frames), 10)}  # fmt: skip
    session.save(path)
    return len(made), len(session.stacks)


def render(tree: str, session: str, out: str | None) -> tuple[float, float]:
    """Seconds and peak MiB of one ``nprof report`` from ``tree``."""
    argv = [sys.executable, "-c", CHILD, "report", session] + (["-o", out] if out else [])
    proc = subprocess.run(argv, **checkouts.run_in(tree), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nprof report from {tree} failed: {proc.stderr[-2000:]}")
    seconds, kib = proc.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(kib) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--stacks", type=int, default=335_000)
    parser.add_argument("--functions", type=int, default=2_700)
    parser.add_argument("--depth", type=int, default=28)
    checkouts.add_argument(parser)
    args = parser.parse_args()
    trees = checkouts.trees(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="nprof-bench-report-") as tmp:
        session = os.path.join(tmp, "many.nprof")
        t = time.perf_counter()
        stacks, nodes = make_session(session, args.stacks, args.functions, args.depth)
        print(f"session: {stacks} distinct stacks, {nodes} tree nodes ({time.perf_counter() - t:.0f} s to make)")
        for rep in range(args.reps):
            for fmt, name in FORMATS.items():
                for tree in trees:  # interleaved, so the machine's hour weighs on each alike
                    seconds, mib = render(tree, session, os.path.join(tmp, name) if name else None)
                    rows.append({"tree": tree, "format": fmt, "rep": rep, "seconds": seconds, "peak_mib": mib,
                                 "stacks": stacks, "nodes": nodes})  # fmt: skip
                    print(f"{os.path.basename(tree)} {fmt}: {seconds:.1f} s, {mib:.0f} MiB", flush=True)
    write_rows(os.path.join(RESULTS, "report.json"), rows)
    print(f"\n{stacks} distinct stacks, {nodes} tree nodes\n")
    print("| tree | output | seconds | peak MiB |\n|---|---|---|---|")
    for tree in trees:
        for fmt in FORMATS:
            mine = [r for r in rows if (r["tree"], r["format"]) == (tree, fmt)]
            seconds = spread([r["seconds"] for r in mine])
            mib = spread([r["peak_mib"] for r in mine])
            print(f"| {os.path.basename(tree)} | {fmt} | {seconds} | {mib} |")


if __name__ == "__main__":
    main()
