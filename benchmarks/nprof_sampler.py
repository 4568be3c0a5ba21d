"""nprof's side of the capture benchmark: sample PID at RATE for SECONDS and report the sampler's own cost.

``--capture-only`` isolates the capture loop (idle checks, interrupt, copy, resume, pump), the part the C
floor sampler also does; without it, the whole recording path runs (unwinding and interning included).
Prints JSON: captures (threads stopped and copied), samples, ticks, cpu_s and wall_s of the sampling loop
alone (start-up excluded).

usage: python -m benchmarks.nprof_sampler PID RATE SECONDS STACK_BYTES [--capture-only] [--priority P]
"""

from __future__ import annotations

import json
import time

import profiler.cli  # noqa: F401  (first, as in the CLI: numpy's threads start with SIGCHLD blocked, events.py)
from benchmarks import sampler_cli
from profiler.config import SamplerConfig, SamplingPriority
from profiler.model import SampleClass
from profiler.profile.session import Session, SessionMeta
from profiler.sampling.sampler import Sampler
from profiler.target import syscalls
from profiler.target.capture import Capture


class CaptureOnlySampler(Sampler):
    """Keeps the per-thread bookkeeping of a capture and skips unwinding and interning."""

    def record(self, capture: Capture) -> None:
        state = self._state(capture.thread)
        state.sampled()
        state.last_stack = -1  # "known", so idle threads are reused as in a real recording
        state.last_class = SampleClass.BLOCKED if syscalls.waiting(capture.slot.regs) else SampleClass.RUNNING
        self.session.add_sample(state.index, -1, 0, state.last_class)


def main() -> None:
    p = sampler_cli.parser(__doc__)
    p.add_argument("--capture-only", action="store_true")
    p.add_argument("--priority", default="auto", choices=[c.value for c in SamplingPriority])
    args = p.parse_args()
    config = SamplerConfig(
        rate=args.rate,
        duration=args.seconds,
        stack_bytes=args.stack_bytes,
        max_stack_bytes=0,  # a fixed window, as the floor copies: no thread's grows (SeizedThread.widen)
        priority=SamplingPriority(args.priority),
    )
    session = Session(SessionMeta(pid=args.pid, command=[]))
    cls = CaptureOnlySampler if args.capture_only else Sampler
    sampler = cls(session, config)
    sampler.add_process(args.pid)
    cpu0, wall0 = time.process_time(), time.monotonic()
    try:
        for _tick in sampler.run():
            pass
    finally:
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        sampler.close()
    stats = sampler.tracer.stats
    print(json.dumps({"captures": stats.captures, "samples": session.total_samples, "ticks": sampler.ticks,
                      "cpu_s": cpu, "wall_s": wall, "held_median_us": (stats.held_quantile(0.5) or 0) / 1e3,
                      "held_p90_us": (stats.held_quantile(0.9) or 0) / 1e3}))  # fmt: skip


if __name__ == "__main__":
    main()
