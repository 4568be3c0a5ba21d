"""Measure what the CPython agent costs a sample: the stop time it adds, and the work after resume.

Not a test: run it by hand, e.g. ``python3 -m benchmarks.bench_cpython_capture --ticks 400``.
For each interpreter it runs ``tests/targets/python/chain.py`` with a ~10-frame Python stack (or, with
``--target recursion``, ``benchmarks/targets/py_recursion.py``, whose stack changes between any two
samples), takes ``--ticks`` captures through the real ``Tracer`` (each thread stopped, copied, resumed),
alternating the two ways the agent can copy during the stop, so both see the same phase of the machine:

* ``capture`` (the walk in the stop, "walk in stop"): what a thread seen for the first time, or one whose
  snapshot fell short, costs; every other tick,
* ``snapshot`` (the sampler's way, "snapshot"): the thread's plan named, nothing walked (since the tenth
  session the tracer copies the plan right after, in its stack window's ``process_vm_readv``: that read
  is not in this time); then, after resume, ``settle`` walks it ("settle"); the share of snapshots that
  fell short and were captured again in a stop is "again %",
* ``frames``: decoding one capture after resume (steady state: code objects cached),
* the syscalls of a ``capture`` (``process_vm_readv`` calls; the read plan makes it 1 once warm) and the
  iovecs of that one call (each costs ~0.6 us in the kernel).

Times are wall-clock medians of the hook inside the stop and include any preemption of nprof itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from agents.cpython import CPythonAgent
from profiler.runtime import RECAPTURE
from profiler.target.process import TargetProcess
from profiler.target.tracer import Tracer
from tests.support.targets import running_target
from tests.targets.python.interpreters import TARGETS, interpreter_params

DEPTH = 4  # chain.py extra frames: <module> main outer middle descend x5 inner = 10 Python frames
TARGET_ARGV = {
    "chain": [os.path.join(TARGETS, "chain.py"), str(DEPTH)],
    "recursion": [os.path.join(os.path.dirname(os.path.abspath(__file__)), "targets", "py_recursion.py")],
}


def measure(python: str, ticks: int, target: str = "chain") -> dict[str, float]:
    tracer = Tracer()
    with running_target([python, *TARGET_ARGV[target]], ready_at=2) as proc:
        try:
            return _measure(proc, tracer, ticks)
        finally:
            tracer.detach_all()


def _measure(proc: subprocess.Popen, tracer: Tracer, ticks: int) -> dict[str, float]:
    process = TargetProcess(proc.pid)
    session = CPythonAgent().detect(process)
    assert session is not None
    tracer.add_process(process)
    full_ns: list[int] = []
    snap_ns: list[int] = []
    syscalls: list[int] = []
    iovecs: list[int] = []

    def full(record, regs):
        t0 = time.perf_counter_ns()
        out = session.capture(record.tid, regs)
        full_ns.append(time.perf_counter_ns() - t0)
        syscalls.append(session._reader.syscalls)
        iovecs.append(session._reader.plan.count)
        return out

    def snap(record, regs):
        t0 = time.perf_counter_ns()
        out = session.snapshot(record.tid, regs)
        if out is None:  # no plan yet: the sampler captures in the stop then
            return session.capture(record.tid, regs)
        snap_ns.append(time.perf_counter_ns() - t0)
        return out

    settle_ns: list[int] = []
    decode_ns: list[int] = []
    again = snapshots = depth = 0
    for tick in range(ticks):
        hook = snap if tick % 2 else full
        for capture in tracer.capture(tracer.seized.sync(proc.pid), copy_stack=False, agent_capture=hook):
            data = capture.agent_data
            if hook is snap:
                snapshots += 1
                t0 = time.perf_counter_ns()
                data = session.settle(data)
                settle_ns.append(time.perf_counter_ns() - t0)
                if data is RECAPTURE:
                    again += 1
                    [capture] = tracer.capture([capture.thread], copy_stack=False, agent_capture=full)
                    data = capture.agent_data
            t0 = time.perf_counter_ns()
            frames = session.frames(data)
            decode_ns.append(time.perf_counter_ns() - t0)
            depth = max(depth, len(frames))
        session.refresh()
        time.sleep(0.002)
    return {
        "frames": depth,
        "capture_median_us": statistics.median(full_ns[5:]) / 1e3,
        "snapshot_median_us": statistics.median(snap_ns[5:]) / 1e3,
        "settle_median_us": statistics.median(settle_ns[5:]) / 1e3,
        "recaptured_pct": 100.0 * again / max(snapshots, 1),
        "syscalls_median": statistics.median(syscalls[5:]),
        "iovecs_median": statistics.median(iovecs[5:]),
        "decode_median_us": statistics.median(decode_ns[5:]) / 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ticks", type=int, default=400)
    parser.add_argument("--target", choices=sorted(TARGET_ARGV), default="chain")
    args = parser.parse_args()
    print(f"{'interpreter':14} {'frames':>6} {'walk in stop':>12} {'snapshot':>8} {'settle':>8} {'again %':>7} "
          f"{'syscalls':>8} {'iovecs':>6} {'decode':>8}  (us)")
    for param in interpreter_params():
        interp = param.values[0]
        if interp is None:
            continue
        m = measure(interp.path, args.ticks, args.target)
        print(f"{interp.label:14} {m['frames']:6d} {m['capture_median_us']:12.1f} {m['snapshot_median_us']:8.1f} "
              f"{m['settle_median_us']:8.1f} {m['recaptured_pct']:7.1f} {m['syscalls_median']:8.0f} "
              f"{m['iovecs_median']:6.0f} {m['decode_median_us']:8.1f}")


if __name__ == "__main__":
    main()
