"""Benchmark: profiling CPython, nprof against py-spy, side by side in one run (issue 4).

For a pure-Python chain (one thread) and an 8-thread target (4 CPU-bound, 2 sleeping, 2 blocked), at
100 Hz and 1000 Hz, each profiler records the target while it does a fixed amount of work:

* slowdown: the target's elapsed time over an unprofiled run of the same repetition;
* profiler CPU per sample: the profiler process's user+system time over the samples it took;
* achieved rate: ticks per second of recording (nprof: its tick counter; py-spy: its "Samples:" count).

A second part measures throughput: each profiler pinned to CPU 0 with the target pinned to CPU 1, at a
rate no sampler reaches, gives the samples it takes per second of one core.

Profilers: nprof (native + Python, the default; and --no-native), py-spy record (Python only) and
py-spy record --native, py-spy installed from the Python package index into benchmarks/.venv
(benchmarks/setup.sh). Repetitions are interleaved and ratios taken per repetition (this 2-vCPU machine
is shared, see ../shared/reference/ptrace-costs.md).

usage: python -m benchmarks.bench_python [--reps 3] [--interpreter PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.results import RESULTS, write_rows

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.join(HERE, ".venv", "bin")
TARGET = os.path.join(HERE, "targets", "py_work.py")
UNITS = {"chain": 300, "threads": 320}  # about 1.5 s of work unprofiled (3.12 here)


def profilers(rate: int, out_dir: str) -> dict[str, list[str]]:
    nprof = [sys.executable, "-m", "profiler", "record", "-r", str(rate), "--pid", "PID"]
    pyspy = [os.path.join(VENV_BIN, "py-spy"), "record", "-r", str(rate), "-f", "raw", "--pid", "PID"]
    return {
        "nprof": [*nprof, "-o", os.path.join(out_dir, "n.nprof")],
        "nprof --no-native": [*nprof, "--no-native", "-o", os.path.join(out_dir, "nn.nprof")],
        "py-spy": [*pyspy, "-o", os.path.join(out_dir, "p.txt")],
        "py-spy --native": [*pyspy, "--native", "-o", os.path.join(out_dir, "pn.txt")],
    }


def attached(pid: int, tracer_pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("TracerPid:") and int(line.split()[1]) == tracer_pid for line in f)
    except OSError:
        return False


def run_once(python: str, mode: str, profiler: list[str] | None, pin: tuple[str, str] | None = None) -> dict:
    """One timed run; returns elapsed, and the profiler's CPU seconds and samples."""
    r, w = os.pipe()
    target_cmd = [python, TARGET, str(w), mode, str(UNITS[mode])]
    if pin:
        target_cmd = ["taskset", "-c", pin[1], *target_cmd]
    target = subprocess.Popen(target_cmd, pass_fds=[w], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    os.close(w)
    try:
        assert os.read(r, 6) == b"ready\n"
        prof = None
        if profiler is not None:
            cmd = [a.replace("PID", str(target.pid)) for a in profiler]
            if pin:
                cmd = ["taskset", "-c", pin[0], *cmd]
            prof = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 30
            while not attached(target.pid, prof.pid) and prof.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)  # polls the target's state, not a synchronisation by sleeping
            time.sleep(0.3)  # let the profiler finish its start-up before the timed work begins
        target.stdin.write(b"x")
        target.stdin.flush()
        elapsed = json.loads(target.stdout.readline())["elapsed"]
        target.wait(timeout=60)
        output, cpu = "", 0.0
        if prof is not None:
            output = prof.stdout.read()
            _pid, _status, usage = os.wait4(prof.pid, 0)  # this profiler's own CPU time, nobody else's
            prof.returncode = 0
            cpu = usage.ru_utime + usage.ru_stime
    finally:
        os.close(r)
        if target.poll() is None:
            target.kill()
            target.wait()
    return {"elapsed": elapsed, "cpu": cpu, "samples": samples_of(output, profiler)}


def samples_of(output: str, profiler: list[str] | None) -> int:
    if profiler is None:
        return 0
    m = re.search(r"Samples: (\d+)", output)  # py-spy
    if m:
        return int(m.group(1))
    m = re.search(r"([\d,]+) samples of", output)  # nprof
    return int(m.group(1).replace(",", "")) if m else 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--interpreter", default=os.path.join(os.environ.get("PYENV_ROOT", "/root/.pyenv"),
                                                           "versions", "3.12.1", "bin", "python3"))  # fmt: skip
    p.add_argument("--out", default=os.path.join(RESULTS, "python.json"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        for rep in range(args.reps):
            for mode in ("chain", "threads"):
                for rate in (100, 1000):
                    base = run_once(args.interpreter, mode, None)["elapsed"]
                    for name, cmd in profilers(rate, out_dir).items():
                        run = run_once(args.interpreter, mode, cmd)
                        rows.append({"rep": rep, "mode": mode, "rate": rate, "profiler": name, "baseline": base,
                                     "slowdown": run["elapsed"] / base, **run})  # fmt: skip
                        print(json.dumps(rows[-1]), file=sys.stderr)
            for name, cmd in profilers(20000, out_dir).items():
                run = run_once(args.interpreter, "chain", cmd, pin=("0", "1"))
                rows.append({"rep": rep, "mode": "throughput", "rate": 20000, "profiler": name, **run})
                print(json.dumps(rows[-1]), file=sys.stderr)
    write_rows(args.out, rows)
    print(table(rows))


def table(rows: list[dict]) -> str:
    med = statistics.median
    out = ["| target | rate | profiler | slowdown | profiler CPU µs/sample | samples/s |", "|---|---|---|---|---|---|"]
    for mode in ("chain", "threads"):
        for rate in (100, 1000):
            for name in ("nprof", "nprof --no-native", "py-spy", "py-spy --native"):
                rs = [r for r in rows if (r["mode"], r["rate"], r["profiler"]) == (mode, rate, name)]
                if not rs:
                    continue
                cpu = med(1e6 * r["cpu"] / r["samples"] for r in rs if r["samples"])
                rate_hz = med(r["samples"] / r["elapsed"] for r in rs)
                out.append(f"| {mode} | {rate} Hz | {name} | {med(r['slowdown'] for r in rs):.3f} | {cpu:.0f} | "
                           f"{rate_hz:.0f} |")  # fmt: skip
    out += ["", "| throughput (profiler on CPU 0, target on CPU 1) | samples/s | profiler CPU µs/sample |", "|---|---|---|"]
    for name in ("nprof", "nprof --no-native", "py-spy", "py-spy --native"):
        rs = [r for r in rows if r["mode"] == "throughput" and r["profiler"] == name]
        if rs:
            out.append(f"| {name} | {med(r['samples'] / r['elapsed'] for r in rs):.0f} | "
                       f"{med(1e6 * r['cpu'] / r['samples'] for r in rs if r['samples']):.0f} |")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    main()
