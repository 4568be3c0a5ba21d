"""Benchmark: profiling CPython, nprof against py-spy, side by side in one run (issue 4).

For a pure-Python chain (one thread) and an 8-thread target (4 CPU-bound, 2 sleeping, 2 blocked), at
100 Hz and 1000 Hz, each profiler records the target while it does a fixed amount of work:

* slowdown: the target's elapsed time over an unprofiled run made just before it (paired: on this shared
  machine the speed drifts within minutes, and a per-repetition baseline let one slow run skew a whole row);
* profiler CPU per sample: the profiler process's user+system time over the samples it took;
* achieved rate: samples per second of the target's run as each tool counts them (nprof: its summary
  line; py-spy: its "Samples:" count; austin: the sample total of its statistics; the floor: its stops).

A second part measures throughput: each profiler pinned to CPU 0 with the target pinned to CPU 1, at a
rate no sampler reaches, gives the stacks it copies per second of one core (``captures_of``).

Profilers: nprof (native + Python, the default; and --no-native), py-spy record (Python only) and
py-spy record --native, austin (Python only; it reads the target's memory without stopping it) and
austinp (austin's native variant, ptrace + libunwind), all installed from the Python package index into
benchmarks/.venv (benchmarks/setup.sh; austin-dist 3.7, as 4.0 needs a newer glibc). The "floor" row is
benchmarks/c/floor_sampler.c, compiled here: registers and a 64 KiB stack window per sample, no Python
frames, no unwinding; the least any sampler that stops its target for a native stack costs it.
Repetitions are interleaved (this 2-vCPU machine is shared, see ../shared/reference/ptrace-costs.md).

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

from benchmarks.bench_capture import build
from benchmarks.results import RESULTS, spread, write_rows
from profiler.model import StopReason
from profiler.profile.session import Session
from profiler.target.procfs import read_status, read_text, split_stat, tracer_process

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.join(HERE, ".venv", "bin")
TARGET = os.path.join(HERE, "targets", "py_work.py")
UNITS = {"chain": 300, "threads": 320}  # about 1.5 s of work unprofiled (3.12 here)
PROFILERS = ("floor", "nprof", "nprof --no-native", "py-spy", "py-spy --native", "austin", "austin --native")
FLOOR_WINDOW = 64 * 1024  #: nprof's default --stack-bytes
#: the CPython measured by default (the one docs/benchmarks.md reports)
DEFAULT_INTERPRETER = os.path.join(os.environ.get("PYENV_ROOT", "/root/.pyenv"), "versions", "3.12.1", "bin", "python3")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def profilers(rate: int, out_dir: str, floor: str) -> dict[str, list[str]]:
    """Each profiler's command line; "PID" stands for the target. The last argument is the output file,
    except for the floor sampler, which writes none."""
    nprof = [sys.executable, "-m", "profiler", "record", "-r", str(rate), "--pid", "PID"]
    pyspy = [os.path.join(VENV_BIN, "py-spy"), "record", "-r", str(rate), "-f", "raw", "--pid", "PID"]
    interval = f"{max(1, round(1e6 / rate))}us"
    return {
        "floor": [floor, "PID", str(rate), "600", str(FLOOR_WINDOW)],  # ends when the target exits
        "nprof": [*nprof, "-o", os.path.join(out_dir, "n.nprof")],
        "nprof --no-native": [*nprof, "--no-native", "-o", os.path.join(out_dir, "nn.nprof")],
        "py-spy": [*pyspy, "-o", os.path.join(out_dir, "p.txt")],
        "py-spy --native": [*pyspy, "--native", "-o", os.path.join(out_dir, "pn.txt")],
        "austin": [os.path.join(VENV_BIN, "austin"), "-i", interval, "-p", "PID", "-o", os.path.join(out_dir, "a.txt")],
        "austin --native": [os.path.join(VENV_BIN, "austinp"), "-i", interval, "-p", "PID",
                            "-o", os.path.join(out_dir, "an.txt")],  # fmt: skip
    }


def attached(pid: int, tracer_pid: int) -> bool:
    """The process ``tracer_pid`` traces ``pid``: TracerPid names the tracing thread, and nprof traces from
    a thread of its own. (Compared with the thread's id, nprof was never seen attached, and each of its runs
    began after the 30 s wait for it, which put 30 s of sampling an idle target into its whole-run CPU.)"""
    status = read_status(pid)
    return status is not None and tracer_process(status.tracer_pid) == tracer_pid


def started(pid: int, profiler: subprocess.Popen, output: str | None) -> bool:
    """The profiler is sampling: it ptrace-attached the target, or (austin, which never stops the target)
    it wrote its output header."""
    if attached(pid, profiler.pid):
        return True
    if output is None:
        return False
    try:
        return os.path.getsize(output) > 0
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
            out_file = profiler[-1] if os.path.isabs(profiler[-1]) else None
            if out_file and os.path.exists(out_file):
                os.unlink(out_file)
            prof = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 30
            while not started(target.pid, prof, out_file) and prof.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)  # polls the target's state, not a synchronisation by sleeping
            time.sleep(0.3)  # let the profiler finish its start-up before the timed work begins
        before = schedstat(target.pid)
        cpu_before = process_cpu(prof.pid) if prof is not None else 0.0
        target.stdin.write(b"x")
        target.stdin.flush()
        elapsed = json.loads(target.stdout.readline())["elapsed"]
        after = schedstat(target.pid)
        cpu_during = process_cpu(prof.pid) - cpu_before if prof is not None else 0.0
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
    samples = samples_of(output, profiler)
    run, waiting, off = (b - a for a, b in zip(before, after))
    return {"elapsed": elapsed, "cpu": cpu, "cpu_during": cpu_during, "samples": samples,
            "captures": captures_of(profiler, samples), "target_run": run, "target_runq": waiting,
            "target_off_cpu": off}  # fmt: skip


def schedstat(pid: int) -> tuple[float, float, float]:
    """The target's main thread: seconds on a CPU, waiting for one, and neither (stopped or asleep), as of
    now. In chain mode the main thread does all the work, so across the timed work these split the slowdown:
    a ptrace stop shows as off-CPU time, CPU contention as run-queue wait, cache and TLB damage as extra
    run time."""
    wall = time.monotonic()
    with open(f"/proc/{pid}/schedstat") as f:
        run_ns, wait_ns, _slices = (int(x) for x in f.read().split())
    return run_ns / 1e9, wait_ns / 1e9, wall - (run_ns + wait_ns) / 1e9


def process_cpu(pid: int) -> float:
    """A process's user + system CPU seconds so far (proc(5) stat fields 14 and 15, in clock ticks): read
    around the timed work, it is the profiler's cost while sampling, without its start-up and its end."""
    fields = split_stat(read_text(f"/proc/{pid}/stat") or "")
    return (int(fields[14]) + int(fields[15])) / os.sysconf("SC_CLK_TCK")


def captures_of(profiler: list[str] | None, samples: int) -> int:
    """Stacks actually copied from the target. nprof also counts a sample for a thread whose run time
    grew less than IDLE_EPSILON_NS since its last one, reusing that stack without stopping it (right for
    an idle thread; at the throughput part's rates it also catches a busy thread whose run time the kernel
    has not accounted yet, docs/benchmarks.md section 5): its session's stop reasons tell the two apart.
    The other tools copy every sample."""
    if not profiler or not profiler[-1].endswith(".nprof") or not os.path.exists(profiler[-1]):
        return samples
    counts = Session.load(profiler[-1]).stop_reason_counts()
    return sum(counts.values()) - counts.get(StopReason.REUSED.label, 0)


def samples_of(output: str, profiler: list[str] | None) -> int:
    if profiler is None:
        return 0
    m = re.search(r'"captures": (\d+)', output)  # the floor sampler
    if m:
        return int(m.group(1))
    m = re.search(r"Samples: (\d+)", output)  # py-spy
    if m:
        return int(m.group(1))
    m = re.search(r"Long sampling rate\s*:\s*\d+/(\d+)", ANSI.sub("", output))  # austin
    if m:
        return int(m.group(1))
    m = re.search(r"([\d,]+) samples of", output)  # nprof
    return int(m.group(1).replace(",", "")) if m else 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--interpreter", default=DEFAULT_INTERPRETER)
    p.add_argument("--out", default=os.path.join(RESULTS, "python.json"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        floor = build(out_dir)["floor_sampler"]
        for rep in range(args.reps):
            for mode in ("chain", "threads"):
                for rate in (100, 1000):
                    for name, cmd in profilers(rate, out_dir, floor).items():
                        base = run_once(args.interpreter, mode, None)
                        run = run_once(args.interpreter, mode, cmd)
                        rows.append({"rep": rep, "mode": mode, "rate": rate, "profiler": name,
                                     "baseline": base["elapsed"], "baseline_run": base["target_run"],
                                     "slowdown": run["elapsed"] / base["elapsed"], **run})  # fmt: skip
                        print(json.dumps(rows[-1]), file=sys.stderr)
            for name, cmd in profilers(20000, out_dir, floor).items():
                if name == "floor":
                    continue  # it paces itself and skips a thread that ran < 100 us: no throughput figure
                run = run_once(args.interpreter, "chain", cmd, pin=("0", "1"))
                rows.append({"rep": rep, "mode": "throughput", "rate": 20000, "profiler": name, **run})
                print(json.dumps(rows[-1]), file=sys.stderr)
    write_rows(args.out, rows)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """The three tables of docs/benchmarks.md section 4, medians over repetitions."""
    med = statistics.median
    names = [n for n in PROFILERS if any(r["profiler"] == n for r in rows)]
    header = "| " + " | ".join(names) + " |"
    rule = "|---|---|" + "---|" * len(names)
    out = ["Slowdown (elapsed / paired unprofiled run; median, with the range over repetitions):", "",
           "| target | rate " + header, rule]  # fmt: skip
    for mode in ("chain", "threads"):
        for rate in (100, 1000):
            cells = []
            for name in names:
                v = [r["slowdown"] for r in rows if (r["mode"], r["rate"], r["profiler"]) == (mode, rate, name)]
                cells.append(spread(v) if v else "—")
            out.append(f"| {mode} | {rate} Hz | " + " | ".join(cells) + " |")
    out += ["", "Marginal profiler CPU per sample, µs ((CPU at 1000 Hz - CPU at 100 Hz) / extra samples, per "
            "repetition; median):", "", "| target " + header, "|---|" + "---|" * len(names)]  # fmt: skip
    for mode in ("chain", "threads"):
        cells = []
        for name in names:
            v = []
            for rep in sorted({r["rep"] for r in rows}):
                pick = {r["rate"]: r for r in rows if (r["mode"], r["profiler"], r["rep"]) == (mode, name, rep)}
                lo, hi = pick.get(100), pick.get(1000)
                if lo and hi and hi["samples"] > lo["samples"]:
                    v.append(1e6 * (hi["cpu"] - lo["cpu"]) / (hi["samples"] - lo["samples"]))
            cells.append(f"{med(v):.0f}" if v else "—")
        out.append(f"| {mode} | " + " | ".join(cells) + " |")
    out += ["", "Achieved rate at 1000 Hz (samples per second of the target's run, as each tool counts them):",
            "", "| target " + header, "|---|" + "---|" * len(names)]  # fmt: skip
    for mode in ("chain", "threads"):
        cells = []
        for name in names:
            v = [
                r["samples"] / r["elapsed"] for r in rows if (r["mode"], r["rate"], r["profiler"]) == (mode, 1000, name)
            ]
            cells.append(f"{med(v):.0f}" if v else "—")
        out.append(f"| {mode} | " + " | ".join(cells) + " |")
    out += ["", "Where the chain's time went at 1000 Hz (its one thread's schedstat over the timed work; median):",
            "", "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]  # fmt: skip
    chain = {n: [r for r in rows if (r["mode"], r["rate"], r["profiler"]) == ("chain", 1000, n)] for n in names}
    split = (
        ("off-CPU µs per stack copied (stopped)", lambda r: 1e6 * r["target_off_cpu"] / max(r["captures"], 1)),
        ("run-queue wait, % of run time", lambda r: 100 * r["target_runq"] / r["target_run"]),
        ("run time / unprofiled run time", lambda r: r["target_run"] / r["baseline_run"]),
    )
    for label, value in split:
        cells = [f"{med(value(r) for r in chain[n]):.2f}" if chain[n] else "—" for n in names]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "| throughput (profiler on CPU 0, target on CPU 1) | stacks copied/s | samples counted/s "
            "| profiler CPU µs/stack copied |", "|---|---|---|---|"]  # fmt: skip
    for name in names:
        rs = [r for r in rows if r["mode"] == "throughput" and r["profiler"] == name and name != "floor"]
        if rs:
            out.append(f"| {name} | {med(r['captures'] / r['elapsed'] for r in rs):.0f} | "
                       f"{med(r['samples'] / r['elapsed'] for r in rs):.0f} | "
                       f"{med(1e6 * r['cpu'] / r['captures'] for r in rs if r['captures']):.0f} |")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    main()
