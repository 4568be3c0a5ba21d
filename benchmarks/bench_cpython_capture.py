"""Measure what the CPython agent costs a sample: the stop time ``capture`` adds, and the decode after resume.

Not a test: run it by hand, e.g. ``python3 -m benchmarks.bench_cpython_capture --ticks 400``.
For each interpreter it runs ``tests/targets/python/chain.py`` with a ~10-frame Python stack (or, with
``--target recursion``, ``benchmarks/targets/py_recursion.py``, whose stack changes between any two
samples), takes
``--ticks`` captures through the real ``Tracer`` (each thread stopped, copied, resumed), and times:

* ``capture``: the agent hook inside the stop (what it adds to the thread's pause), on every other tick
  as is ("min", "median", ...) and on the ticks between right after ``session.warm()``, as the sampler
  runs it ("warmed"): interleaved, so both see the same phase of the machine,
* ``frames``: decoding one capture after resume (steady state: code objects cached),
* the syscalls per capture (``process_vm_readv`` calls; the read plan makes it 1 once warm) and the
  iovecs of that one call (each costs ~0.6 us in the kernel).

Wall times include any preemption of nprof itself; ``cpu`` is the hook's own CPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from agents.cpython import CPythonAgent
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
    capture_ns: list[int] = []
    cpu_ns: list[int] = []
    syscalls: list[int] = []
    iovecs: list[int] = []

    def hook(record, regs):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        out = session.capture(record.tid, regs)
        cpu_ns.append(time.thread_time_ns() - c0)
        capture_ns.append(time.perf_counter_ns() - t0)
        syscalls.append(session._reader.syscalls)
        iovecs.append(session._reader.plan.count)
        return out

    decode_ns: list[int] = []
    warm_ns: list[int] = []
    depth = 0
    for tick in range(ticks):
        warm = tick % 2 == 1  # interleaved with cold ticks, so both see the same phase of this noisy VM
        if warm:
            session.warm()  # as the sampler does just before a tick's stops
        start = len(capture_ns)
        for capture in tracer.capture(tracer.sync_threads(proc.pid), copy_stack=False, agent_capture=hook):
            t0 = time.perf_counter_ns()
            frames = session.frames(capture.agent_data)
            decode_ns.append(time.perf_counter_ns() - t0)
            depth = max(depth, len(frames))
        if warm:
            warm_ns.extend(capture_ns[start:])
            del capture_ns[start:], cpu_ns[start:], syscalls[start:], iovecs[start:]
        session.refresh()
        time.sleep(0.002)
    warm = capture_ns[10:]
    return {
        "capture_warm_median_us": statistics.median(warm_ns[10:]) / 1e3,
        "frames": depth,
        "capture_first_us": capture_ns[0] / 1e3,
        "capture_min_us": min(warm) / 1e3,
        "capture_median_us": statistics.median(warm) / 1e3,
        "capture_p90_us": sorted(warm)[int(0.9 * len(warm))] / 1e3,
        "capture_cpu_us": statistics.median(cpu_ns[10:]) / 1e3,
        "syscalls_median": statistics.median(syscalls[10:]),
        "iovecs_median": statistics.median(iovecs[10:]),
        "decode_median_us": statistics.median(decode_ns[10:]) / 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ticks", type=int, default=400)
    parser.add_argument("--target", choices=sorted(TARGET_ARGV), default="chain")
    args = parser.parse_args()
    print(f"{'interpreter':14} {'frames':>6} {'first':>8} {'min':>8} {'median':>8} {'p90':>8} {'cpu':>8} "
          f"{'syscalls':>8} {'iovecs':>6} {'decode':>8} {'warmed':>8}  (us)")
    for param in interpreter_params():
        interp = param.values[0]
        if interp is None:
            continue
        m = measure(interp.path, args.ticks, args.target)
        print(f"{interp.label:14} {m['frames']:6d} {m['capture_first_us']:8.1f} {m['capture_min_us']:8.1f} "
              f"{m['capture_median_us']:8.1f} "
              f"{m['capture_p90_us']:8.1f} {m['capture_cpu_us']:8.1f} {m['syscalls_median']:8.0f} "
              f"{m['iovecs_median']:6.0f} {m['decode_median_us']:8.1f} {m['capture_warm_median_us']:8.1f}")


if __name__ == "__main__":
    main()
