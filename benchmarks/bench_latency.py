"""Benchmark: what a user waits for (issue 44, point 1), nprof against py-spy on the same targets in one run.

* dump: ``dump --pid P`` wall time for a 10-thread CPython process (``targets/py_busy_threads.py``: 9
  threads in a pure-Python loop with short sleeps, the main thread asleep); nprof with native frames (its
  default) and ``--no-native``, py-spy without and with ``--native``.
* error: wall time until ``record --pid`` and ``dump --pid`` report a pid that does not exist, or a kernel
  thread (kthreadd, pid 2: as root, the one process here nothing may profile). For these and the dumps,
  also the command's CPU time, which the load cannot inflate.
* first sample: from the profiler's launch to the line that says it samples (nprof: "nprof: recording pid"
  on stderr, printed after its attach, just before its first tick; py-spy: "Sampling process" on stdout),
  read line by line as it comes, for ``record --pid P -d 3`` of the 10-thread process and for ``record --
  python py_json_loop.py 3`` (``targets/py_json_loop.py``: json over 2,000 small dicts for 3 s).
* end: for the launched program, from its exit (it writes ``time.monotonic()`` just before exiting) to the
  profiler's; for ``--pid P -d 3``, the profiler's exit minus its announcement plus 3 s. With
  ``--long-reps``, also ``--pid P -d 10`` (and its whole wall time).

Both write speedscope (``-o x.speedscope.json``; py-spy ``--format speedscope``), at both tools' default
100 Hz. nprof runs as ``python3 -m profiler`` from this checkout. Its caches (compiled CFI tables, decoded
line tables, resolved frames: ``$XDG_CACHE_HOME/nprof``) are a directory of this run's: "warm" after one
unmeasured run of every command first (for ``-d 10``, that of ``-d 3``), "cold" a fresh empty one per run
(the OS page cache stays warm: this machine is shared, so it is not dropped). py-spy keeps no cache.
Repetitions are interleaved, the order of the tools rotated each repetition; ratios are against py-spy's
run of the same repetition. Results in docs/benchmarks.md, raw rows in benchmarks/results/latency.json.

usage: python -m benchmarks.bench_latency [--reps 5] [--long-reps 3] [--interpreter PATH]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.bench_dump import running
from benchmarks.bench_python import DEFAULT_INTERPRETER
from benchmarks.results import RESULTS, spread, write_rows

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
PY_SPY = os.path.join(HERE, ".venv", "bin", "py-spy")
BUSY = os.path.join(HERE, "targets", "py_busy_threads.py")
JSON_LOOP = os.path.join(HERE, "targets", "py_json_loop.py")
BUSY_THREADS = 9  #: with the main thread, the issue's "10-thread CPython process"
SECONDS = 3  #: the recordings' length (the issue's end goal is for 10 s: ``--long-reps``)
LONG_SECONDS = 10
KTHREADD = 2  #: the kernel's thread creator, pid 2 on every Linux
#: what each tool prints once it samples; nprof's comes after its attach, just before its first tick
ANNOUNCEMENTS = {"nprof": b"nprof: recording pid", "py-spy": b"Sampling process"}
#: the sample count in each tool's last words (both: one per thread sampled, idle threads left out). py-spy's
#: -d is a count of ticks (duration × rate: its record_samples), so a py-spy that falls behind records past it
SAMPLES = {"nprof": re.compile(rb"([\d,]+) samples of"), "py-spy": re.compile(rb"Samples: (\d+)")}
DUMPERS = (("nprof", "warm"), ("nprof", "cold"), ("nprof --no-native", "warm"), ("nprof --no-native", "cold"),
           ("py-spy", "-"), ("py-spy --native", "-"))  # fmt: skip
RECORDERS = (("nprof", "warm"), ("nprof", "cold"), ("py-spy", "-"), ("py-spy --native", "-"))
ERRORS = (("nprof", "warm"), ("py-spy", "-"))


def command(tool: str, verb: str, args: list[str], output: str | None = None) -> list[str]:
    """``tool`` is a profiler's name and its flags ("py-spy --native"); ``output`` a speedscope file to write."""
    name, *flags = tool.split()
    base = [sys.executable, "-m", "profiler"] if name == "nprof" else [PY_SPY]
    if output is not None:
        flags += ["-o", output] if name == "nprof" else ["--format", "speedscope", "-o", output]
    return [*base, verb, *flags, *args]


def announced(tool: str, line: bytes) -> bool:
    """Whether ``line`` of the tool's output says it has started sampling."""
    return ANNOUNCEMENTS[tool.split()[0]] in line


@dataclass
class Watched:
    """A profiler's run as the user sees it: every output line with the time it arrived (``time.monotonic``)."""

    launched: float
    exited: float = 0.0
    rc: int | None = None
    lines: list[tuple[float, bytes]] = field(default_factory=list)

    def announcement(self, tool: str) -> float:
        for at, line in self.lines:
            if announced(tool, line):
                return at
        raise RuntimeError(f"{tool} never said it sampled (exit status {self.rc}): {self.text()}")

    def samples(self, tool: str) -> int | None:
        """The samples the tool says it took."""
        found = SAMPLES[tool.split()[0]].search(b"".join(line for _, line in self.lines))
        return int(found.group(1).replace(b",", b"")) if found else None

    def text(self) -> str:
        return b"".join(line for _, line in self.lines).decode(errors="replace")


def watch(argv: list[str], env: dict[str, str], timeout: float) -> Watched:
    """Run ``argv`` with its stdout and stderr read line by line as they come, until it exits. It runs in a
    session of its own, so that a run that overstays ``timeout`` is killed with what it launched."""
    run = Watched(launched=time.monotonic())
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    stdout = proc.stdout

    def read() -> None:
        for line in iter(stdout.readline, b""):
            run.lines.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        run.rc = proc.wait(timeout)
        run.exited = time.monotonic()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        reader.join(5)
        stdout.close()
    return run


@dataclass
class Timed:
    """A command run to its end: wall and CPU seconds (user + system, its children reaped by it included),
    exit status and last line of output. The CPU time is what load cannot inflate, the least its wall time
    could be on an idle machine (less the time it spends waiting)."""

    wall: float
    cpu: float
    rc: int
    said: str


def timed(argv: list[str], env: dict[str, str]) -> Timed:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=120)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    said = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
    return Timed(wall, cpu, result.returncode, said[-1][:200] if said else "")


def missing_pid() -> int:
    """A pid no process has now (the highest free one, the last the kernel would hand out)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


class Bench:
    """One run's measurements: nprof's caches in its own directory, and the rows so far."""

    def __init__(self, work: str, interpreter: str) -> None:
        self.work, self.interpreter = work, interpreter
        self.warm_cache = os.path.join(work, "warm-cache")
        self.rows: list[dict[str, Any]] = []
        self.rep = -1  #: -1 while warming up: those runs are not kept

    @contextmanager
    def env(self, cache: str) -> Iterator[dict[str, str]]:
        env = dict(os.environ, PYTHONPATH=CHECKOUT)
        if cache != "cold":
            yield dict(env, XDG_CACHE_HOME=self.warm_cache)
            return
        with tempfile.TemporaryDirectory(dir=self.work, ignore_cleanup_errors=True) as empty:
            yield dict(env, XDG_CACHE_HOME=empty)

    def keep(self, measure: str, cmd: str, target: str, tool: str, cache: str, seconds: float, **more: object) -> None:
        if self.rep >= 0:
            self.rows.append({"rep": self.rep, "measure": measure, "command": cmd, "target": target, "tool": tool,
                              "cache": cache, "seconds": seconds, "load1": os.getloadavg()[0], **more})  # fmt: skip

    def order(self, variants: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
        """The variants in this repetition's order: rotated by one each repetition."""
        turn = max(self.rep, 0) % len(variants)
        return [*variants[turn:], *variants[:turn]]

    def dumps(self, pid: int) -> None:
        for tool, cache in self.order(DUMPERS):
            with self.env(cache) as env:
                run = timed(command(tool, "dump", ["--pid", str(pid)]), env)
            if run.rc != 0:
                raise RuntimeError(f"{tool} dump failed ({run.rc}): {run.said}")
            self.keep("dump", "dump --pid", "10 threads", tool, cache, run.wall, cpu=run.cpu)

    def errors(self) -> None:
        for target, pid in (("no such pid", missing_pid()), ("kernel thread (pid 2)", KTHREADD)):
            for verb in ("record", "dump"):
                for tool, cache in self.order(ERRORS):
                    output = os.path.join(self.work, "error.speedscope.json") if verb == "record" else None
                    with self.env(cache) as env:
                        run = timed(command(tool, verb, ["--pid", str(pid)], output), env)
                    if run.rc == 0:
                        raise RuntimeError(f"{tool} {verb} --pid {pid} succeeded")
                    self.keep("error", f"{verb} --pid", target, tool, cache, run.wall, cpu=run.cpu, said=run.said)

    def record_pid(self, pid: int, seconds: int, variants: tuple[tuple[str, str], ...] = RECORDERS) -> None:
        cmd = f"record --pid -d {seconds}"
        for tool, cache in self.order(variants):
            output = os.path.join(self.work, "pid.speedscope.json")
            with self.env(cache) as env:
                run = watch(command(tool, "record", ["--pid", str(pid), "-d", str(seconds)], output), env, seconds + 60)
            sampling = run.announcement(tool)
            if run.rc != 0:
                raise RuntimeError(f"{tool} {cmd} failed ({run.rc}): {run.text()}")
            samples = run.samples(tool)
            self.keep("first sample", cmd, "10 threads", tool, cache, sampling - run.launched, samples=samples)
            self.keep("end", cmd, "10 threads", tool, cache, run.exited - (sampling + seconds), samples=samples)
            if seconds == LONG_SECONDS:
                self.keep("whole command", cmd, "10 threads", tool, cache, run.exited - run.launched, samples=samples)

    def record_launched(self) -> None:
        cmd = f"record -- python py_json_loop.py {SECONDS}"
        for tool, cache in self.order(RECORDERS):
            output = os.path.join(self.work, "launched.speedscope.json")
            times = os.path.join(self.work, "exit-time")
            program = [self.interpreter, JSON_LOOP, str(SECONDS), times]
            try:
                with self.env(cache) as env:
                    run = watch(command(tool, "record", ["--", *program], output), env, SECONDS + 60)
                sampling = run.announcement(tool)
                with open(times) as f:
                    lines = f.read().split()
                if run.rc != 0 or len(lines) != 2:
                    raise RuntimeError(f"{tool} {cmd} failed ({run.rc}): {run.text()}")
            finally:
                _end_leftover(times)
            samples = run.samples(tool)
            self.keep("first sample", cmd, "json loop", tool, cache, sampling - run.launched, samples=samples)
            self.keep("end", cmd, "json loop", tool, cache, run.exited - float(lines[1]), samples=samples)


def _end_leftover(times: str) -> None:
    """Kill the launched program if it outlived its profiler (a profiler killed on its timeout): its pid is
    the first line it wrote, and it is known by its command line."""
    try:
        with open(times) as f:
            pid = int(f.readline())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            mine = JSON_LOOP.encode() in f.read()
        if mine:
            os.kill(pid, 9)
    except (OSError, ValueError):
        pass
    finally:
        if os.path.exists(times):
            os.unlink(times)


def table(rows: list[dict[str, Any]]) -> str:
    """Medians with ranges; each nprof row's ratio to py-spy (and to py-spy --native) of the same
    repetition, where py-spy's time is positive; CPU seconds where they were measured."""
    out = ["| measure | command | target | tool | nprof cache | seconds | × py-spy | × py-spy --native | CPU s |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups = dict.fromkeys((r["measure"], r["command"], r["target"]) for r in rows)
    for measure, cmd, target in groups:
        picked = [r for r in rows if (r["measure"], r["command"], r["target"]) == (measure, cmd, target)]
        for tool, cache in dict.fromkeys((r["tool"], r["cache"]) for r in picked):
            mine = {r["rep"]: r["seconds"] for r in picked if (r["tool"], r["cache"]) == (tool, cache)}
            cells = [spread(list(mine.values()))]
            for peer in ("py-spy", "py-spy --native"):
                theirs = {r["rep"]: r["seconds"] for r in picked if r["tool"] == peer}
                ratios = [mine[rep] / theirs[rep] for rep in mine if theirs.get(rep, 0) > 0]
                cells.append(spread(ratios) if ratios and tool.startswith("nprof") else "—")
            cpu = [r["cpu"] for r in picked if (r["tool"], r["cache"]) == (tool, cache) and "cpu" in r]
            cells.append(spread(cpu) if cpu else "—")
            out.append(f"| {measure} | `{cmd}` | {target} | {tool} | {cache} | {' | '.join(cells)} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--long-reps", type=int, default=3, help="repetitions of the 10 s recording (0: none)")
    p.add_argument("--interpreter", default=DEFAULT_INTERPRETER)
    p.add_argument("--out", default=os.path.join(RESULTS, "latency.json"))
    args = p.parse_args()
    if not os.access(PY_SPY, os.X_OK):
        sys.exit(f"{PY_SPY} is missing: run benchmarks/setup.sh first")
    print(f"load average at the start: {os.getloadavg()}", file=sys.stderr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as work:
        bench = Bench(work, args.interpreter)
        for rep in range(-1, args.reps):  # -1: the unmeasured run of each command, which warms the cache
            bench.rep = rep
            print(f"repetition {rep + 1} of {args.reps} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
            with running([args.interpreter, BUSY, "FD", str(BUSY_THREADS)]) as target:
                bench.dumps(target.pid)
                bench.errors()
                bench.record_pid(target.pid, SECONDS)
            bench.record_launched()
        for rep in range(args.long_reps):
            bench.rep = rep
            print(f"10 s recording {rep + 1} of {args.long_reps} ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr)  # fmt: skip
            with running([args.interpreter, BUSY, "FD", str(BUSY_THREADS)]) as target:
                bench.record_pid(target.pid, LONG_SECONDS)
    write_rows(args.out, bench.rows)
    print(f"load average at the end: {os.getloadavg()}; {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(table(bench.rows))


if __name__ == "__main__":
    main()
