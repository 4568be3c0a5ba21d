"""Benchmark: what one sample costs, nprof against the floor, in one run.

Measures, for 1 and 8 busy threads and 16 KiB and 64 KiB stack windows:

* sampler CPU time per stopped thread (a "capture"), paced (1 kHz, 200 Hz) and flat out ("max"), for
  the C floor sampler (benchmarks/c/floor_sampler.c: the same system calls as nprof's capture loop,
  nothing else), the same calls made from Python with nothing around them (benchmarks/python_floor.py,
  sleeping between ticks as the C floor does, and waiting with nprof's alarm instead), nprof's capture
  loop alone (``--capture-only``), and nprof's whole recording path (capture + unwind + intern);
* the stall the target sees per capture: the target (benchmarks/c/gaps_target.c) times its own execution
  gaps; the excess over an unprofiled baseline of the same repetition, divided by the captures. With 8
  busy threads on 2 CPUs every thread is off-CPU ~75% of the time anyway, so this mixes ptrace stops with
  time slicing (ptrace-costs.md drops it there); the sampler-side hold (stop seen -> resumed) is given too.

Repetitions are interleaved (every sampler in every repetition) and ratios are taken within a repetition,
because this 2-vCPU machine is shared and noisy (../shared/reference/ptrace-costs.md, "Noise notes").
Writes benchmarks/results/capture.json and prints a Markdown table for docs/benchmarks.md.

usage: python -m benchmarks.bench_capture [--reps 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

from benchmarks.results import RESULTS, write_rows

HERE = os.path.dirname(os.path.abspath(__file__))
#: a rate no sampler here reaches: each runs flat out, so its cost per sample leaves out the sleep and the
#: wake-up between ticks, which on this VM cost more than the sample itself (ptrace-costs.md's "max" mode,
#: where the C floor measured ~11 us of sampler CPU per sample on one CPU and ~27 us across two)
SATURATED = 20000.0
CONFIGS = [  # (threads, rate): the paced rates of ptrace-costs.md (1 kHz for one thread, 200 Hz for eight)
    (1, 1000.0),
    (8, 200.0),
    (1, SATURATED),
]
WINDOWS = [16 * 1024, 64 * 1024]


def build(out_dir: str) -> dict[str, str]:
    paths = {}
    for name, extra in (("gaps_target", ["-pthread"]), ("floor_sampler", [])):
        path = os.path.join(out_dir, name)
        subprocess.run(["gcc", "-O2", *extra, "-o", path, os.path.join(HERE, "c", f"{name}.c")], check=True)
        paths[name] = path
    return paths


def run_target(binary: str, threads: int, sampler: list[str] | None, seconds: float) -> tuple[dict, dict | None]:
    r, w = os.pipe()
    target = subprocess.Popen([binary, str(w), str(threads)], pass_fds=[w], stdout=subprocess.PIPE, text=True)
    os.close(w)
    try:
        assert os.read(r, 6) == b"ready\n"
        result = None
        if sampler is None:
            subprocess.run(["sleep", str(seconds)], check=True)
        else:
            done = subprocess.run([s.replace("PID", str(target.pid)) for s in sampler], capture_output=True,
                                  text=True, check=True)  # fmt: skip
            result = json.loads(done.stdout)
        target.send_signal(signal.SIGUSR1)
        report = json.loads(target.communicate(timeout=60)[0])
    finally:
        os.close(r)
        if target.poll() is None:
            target.kill()
            target.wait()
    return report, result


def gap_seconds(report: dict) -> float:
    """Off-CPU time per second of the target's run, summed over threads."""
    return sum(t["total_ns"] for t in report["threads"]) / 1e9 / report["elapsed"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", default=os.path.join(RESULTS, "capture.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bins = build(tmp)
        py = [sys.executable, "-m", "benchmarks.nprof_sampler"]
        rows = []
        for rep in range(args.reps):
            for threads, rate in CONFIGS:
                for window in WINDOWS:
                    common = ["PID", str(rate), str(args.seconds), str(window)]
                    samplers = {
                        "floor": [bins["floor_sampler"], *common],
                        "python-floor": [sys.executable, "-m", "benchmarks.python_floor", *common],
                        "python-floor-alarm": [sys.executable, "-m", "benchmarks.python_floor", *common,
                                               "--wait", "alarm"],  # fmt: skip
                        "nprof-capture": [*py, *common, "--capture-only"],
                        "nprof-record": [*py, *common],
                    }
                    base, _ = run_target(bins["gaps_target"], threads, None, args.seconds)
                    for name, cmd in samplers.items():
                        report, result = run_target(bins["gaps_target"], threads, cmd, args.seconds)
                        captures = max(result["captures"], 1)
                        excess = (gap_seconds(report) - gap_seconds(base)) * report["elapsed"]
                        rows.append({
                            "rep": rep, "threads": threads, "rate": rate, "window": window, "sampler": name,
                            "captures": result["captures"], "ticks": result["ticks"],
                            "achieved_hz": result["ticks"] / result["wall_s"],
                            "cpu_us_per_capture": 1e6 * result["cpu_s"] / captures,
                            "stall_us_per_capture": 1e6 * excess / captures,
                            "median_gap_us": statistics.median(t["median_ns"] for t in report["threads"]) / 1e3,
                            "held_median_us": result["held_median_us"], "held_p90_us": result["held_p90_us"],
                        })  # fmt: skip
                        print(json.dumps(rows[-1]), file=sys.stderr)
    write_rows(args.out, rows)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Medians over repetitions of each metric, and of the per-repetition ratio nprof / floor."""
    out = [
        "| threads | rate | window | sampler | achieved Hz | CPU µs/capture | ×floor | target stall µs/capture "
        "| ×floor | held µs median / p90 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["rate"] == SATURATED, r["threads"], r["rate"], r["window"]) for r in rows})
    for _, threads, rate, window in keys:
        config = (threads, rate, window)
        for name in ("floor", "python-floor", "python-floor-alarm", "nprof-capture", "nprof-record"):
            mine = [r for r in rows if (r["threads"], r["rate"], r["window"], r["sampler"]) == (*config, name)]
            if not mine:
                continue
            floor = {r["rep"]: r for r in rows
                     if (r["threads"], r["rate"], r["window"], r["sampler"]) == (*config, "floor")}  # fmt: skip
            med = lambda k, mine=mine: statistics.median(r[k] for r in mine)  # noqa: E731
            ratio = lambda k, mine=mine, floor=floor: statistics.median(  # noqa: E731
                r[k] / floor[r["rep"]][k] for r in mine if floor[r["rep"]][k] > 0
            )
            # with 8 busy threads on 2 CPUs the target's gaps are mostly time slicing (module docstring), and
            # a saturated sampler stops its target most of the time; the Python floor does not time its holds
            stall = (f"{med('stall_us_per_capture'):.1f} | {ratio('stall_us_per_capture'):.2f}"
                     if threads == 1 and rate != SATURATED else "— | —")  # fmt: skip
            held = "—" if name.startswith("python") else f"{med('held_median_us'):.1f} / {med('held_p90_us'):.1f}"
            shown = "max" if rate == SATURATED else f"{rate:.0f} Hz"
            out.append(
                f"| {threads} | {shown} | {window // 1024} KiB | {name} | {med('achieved_hz'):.0f} | "
                f"{med('cpu_us_per_capture'):.1f} | {ratio('cpu_us_per_capture'):.2f} | {stall} | {held} |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    main()
