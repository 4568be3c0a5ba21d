"""Benchmark: how much a sampler's own CPU use slows its target, apart from the stops (issue 4).

The slowdown goal (at most 1.05 at 1000 Hz) is met or missed by more than the time a thread is stopped.
Here the pure-Python chain of ``bench_python`` is recorded at 1000 Hz by:

* the C floor sampler alone (registers and a 64 KiB window per stop, ~8% of a CPU);
* the floor with ``benchmarks/c/duty_load.c`` running beside it, busy for 100, 250 or 500 µs of every
  millisecond: a load that does not touch the target at all, standing in for a sampler's work between
  its stops (unwinding, decoding, counting);
* nprof, native + Python and ``--no-native``.

For each it reports the slowdown, and splits the target's time (its one thread's schedstat, as
``bench_python`` does): its own run time against the unprofiled run's, and its off-CPU time per stop.
It also reports each sampler's CPU share while the target worked (start-up and the end left out).
If the load's rows slow the target as nprof does at a like CPU share, then what nprof costs its target
above the floor is its CPU use between stops, not its stops.

Repetitions are interleaved and each run is paired with an unprofiled run just before it (this 2-vCPU
machine is shared, ../shared/reference/ptrace-costs.md).

usage: python -m benchmarks.bench_corun [--reps 6] [--loads 100 250 500] [--interpreter PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile

from benchmarks.bench_capture import build
from benchmarks.bench_python import DEFAULT_INTERPRETER, profilers, run_once
from benchmarks.results import RESULTS, spread, write_rows

HERE = os.path.dirname(os.path.abspath(__file__))
RATE = 1000
LOADS_US = (100, 250, 500)  #: busy microseconds per millisecond beside the floor, by default


def variants(
    floor: str, load: str, out_dir: str, loads_us: tuple[int, ...] = LOADS_US
) -> dict[str, tuple[list[str], list[str] | None]]:
    """name -> (the sampler's command, the load's command or None)."""
    cmds = profilers(RATE, out_dir, floor)
    out: dict[str, tuple[list[str], list[str] | None]] = {"floor": (cmds["floor"], None)}
    for busy in loads_us:
        out[f"floor + load {busy} µs/ms"] = (cmds["floor"], [load, str(busy)])
    out["nprof"] = (cmds["nprof"], None)
    out["nprof --no-native"] = (cmds["nprof --no-native"], None)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--interpreter", default=DEFAULT_INTERPRETER)
    p.add_argument("--loads", type=int, nargs="+", default=list(LOADS_US), help="busy µs per ms beside the floor")
    p.add_argument("--out", default=os.path.join(RESULTS, "corun.json"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        floor = build(tmp)["floor_sampler"]
        load = os.path.join(tmp, "duty_load")
        subprocess.run(["gcc", "-O2", "-o", load, os.path.join(HERE, "c", "duty_load.c")], check=True)
        runs = variants(floor, load, tmp, tuple(args.loads))
        names = list(runs)
        for rep in range(args.reps):
            for name in names if rep % 2 == 0 else names[::-1]:
                sampler, load_cmd = runs[name]
                base = run_once(args.interpreter, "chain", None)
                beside = subprocess.Popen(load_cmd) if load_cmd else None
                try:
                    run = run_once(args.interpreter, "chain", sampler)
                finally:
                    if beside is not None:
                        beside.kill()
                        beside.wait()
                rows.append({
                    "rep": rep, "variant": name, "slowdown": run["elapsed"] / base["elapsed"],
                    "run_time_ratio": run["target_run"] / base["target_run"],
                    "off_cpu_us_per_stop": 1e6 * run["target_off_cpu"] / max(run["captures"], 1),
                    "sampler_cpu_share": run["cpu_during"] / run["elapsed"],
                })  # fmt: skip
                print(rows[-1], flush=True)
    write_rows(args.out, rows)
    print(table(rows, names))


def table(rows: list[dict], names: list[str]) -> str:
    """Medians over repetitions (range of the slowdown in brackets)."""
    out = [
        "| recorded by | slowdown | target run time ×unprofiled | off-CPU µs per stop | sampler CPU while sampling |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        mine = [r for r in rows if r["variant"] == name]

        def med(key: str, mine: list = mine) -> float:
            return statistics.median(r[key] for r in mine)

        out.append(f"| {name} | {spread([r['slowdown'] for r in mine])} | "
                   f"{med('run_time_ratio'):.3f} | {med('off_cpu_us_per_stop'):.0f} | "
                   f"{100 * med('sampler_cpu_share'):.0f}% |")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    main()
