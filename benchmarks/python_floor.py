"""The least a Python sampler can do per tick: the C floor's system calls (benchmarks/c/floor_sampler.c), made
from Python with nothing around them. It tells how much of nprof's capture-loop cost is Python itself and
how much is nprof's own structure.

Per tick: pread each thread's schedstat, and its stat unless it has not been on a CPU since its last sample;
PTRACE_INTERRUPT those that ran (nprof's idle checks, profiler/sampling/sampler.py); as
each reports its stop: PTRACE_GETREGS, one process_vm_readv of the stack window, PTRACE_CONT; then
waitpid(WNOHANG) for events. Like the C floor it runs at SCHED_FIFO 10 when permitted. Between ticks,
``--wait sleep`` (the C floor's way) sleeps until the next tick;
``--wait alarm`` blocks in waitpid until the thread-directed alarm nprof uses (profiler/target/alarm.py)
ends the wait, which is how nprof answers a tracee's events between ticks at once. The same calls as
nprof's binding layer (profiler/target/ptrace.py). Prints the floor sampler's JSON.

usage: python -m benchmarks.python_floor PID RATE SECONDS STACK_BYTES [--wait sleep|alarm]
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import time

from benchmarks import sampler_cli
from profiler.sampling.priority import FIFO_PRIORITY
from profiler.target import ptrace as pt
from profiler.target.alarm import ThreadAlarm

PTRACE_GETREGS = 12  # linux/ptrace.h (x86-64)
PTRACE_CONT = 7
PTRACE_DETACH = 17


def main() -> None:
    p = sampler_cli.parser(__doc__)
    p.add_argument("--wait", choices=("sleep", "alarm"), default="sleep")
    args = p.parse_args()
    pid = args.pid
    ptrace, waitpid, readv = pt.raw_ptrace, pt.raw_waitpid, pt.raw_process_vm_readv
    status = ctypes.c_int()
    status_ref = ctypes.byref(status)
    regs = pt.user_regs_struct()
    regs_ref = ctypes.byref(regs)
    window = ctypes.create_string_buffer(args.stack_bytes)
    local, remote = pt.iovec(ctypes.addressof(window), args.stack_bytes), pt.iovec(0, args.stack_bytes)
    local_ref, remote_ref = ctypes.byref(local), ctypes.byref(remote)
    alarm = ThreadAlarm() if args.wait == "alarm" else None
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))  # as the C floor, once
    except PermissionError:
        pass  # normal priority, as nprof falls back
    threads = {}
    for tid in (int(t) for t in os.listdir(f"/proc/{pid}/task")):
        if ptrace(pt.PTRACE_SEIZE, tid, 0, 0) == 0:
            base = f"/proc/{pid}/task/{tid}"
            threads[tid] = [os.open(f"{base}/schedstat", os.O_RDONLY), os.open(f"{base}/stat", os.O_RDONLY), -1, -1]

    def answer(tid: int, wait_status: int) -> None:
        """An event between ticks: let a stopped thread go on (with the signal it stopped for, if any)."""
        if wait_status & 0xFF == 0x7F:
            ptrace(PTRACE_CONT, tid, 0, 0 if wait_status >> 16 else (wait_status >> 8) & 0xFF)

    captures = ticks = 0
    start = time.monotonic()
    cpu0 = time.process_time()
    next_due = start
    while time.monotonic() - start < args.seconds:
        due = 0
        for tid, entry in threads.items():
            fields = os.pread(entry[0], 128, 0).split()
            run_time, slices = int(fields[0]), int(fields[2])
            same = entry[2] >= 0 and run_time - entry[2] <= 100_000
            if same and slices == entry[3]:
                continue  # not on a CPU since its last sample
            stat = os.pread(entry[1], 512, 0)
            entry[3] = slices
            if same and stat[stat.rindex(b")") + 2] != ord("R"):
                continue  # ran a little, sleeps now
            entry[2] = run_time
            if ptrace(pt.PTRACE_INTERRUPT, tid, 0, 0) == 0:
                due += 1
        stopped = 0
        while stopped < due:
            tid = waitpid(-1, status_ref, pt.WALL)
            if tid < 0:
                if ctypes.get_errno() == errno.EINTR:
                    continue  # the alarm's backstop (--wait alarm)
                break
            if status.value & 0xFF != 0x7F:
                continue  # exited instead of stopping
            stopped += 1
            ptrace(PTRACE_GETREGS, tid, 0, regs_ref)
            remote.iov_base = regs.rsp
            readv(pid, local_ref, 1, remote_ref, 1, 0)
            ptrace(PTRACE_CONT, tid, 0, 0)
            captures += 1
        while (tid := waitpid(-1, status_ref, pt.WALL | pt.WNOHANG)) > 0:
            answer(tid, status.value)
        ticks += 1
        next_due += 1.0 / args.rate
        wait = next_due - time.monotonic()
        if wait <= 0:
            next_due = time.monotonic()
        elif alarm is None:
            time.sleep(wait)
        else:
            alarm.arm(wait, 0.001)
            while time.monotonic() < next_due:
                tid = waitpid(-1, status_ref, pt.WALL)
                if tid > 0:
                    answer(tid, status.value)  # a tracee event; otherwise EINTR: the alarm
    cpu, wall = time.process_time() - cpu0, time.monotonic() - start
    if alarm is not None:
        alarm.close()
    for tid in threads:
        ptrace(pt.PTRACE_INTERRUPT, tid, 0, 0)
    for _ in threads:
        tid = waitpid(-1, status_ref, pt.WALL)
        if tid > 0:
            ptrace(PTRACE_DETACH, tid, 0, 0)
    print(json.dumps({"captures": captures, "ticks": ticks, "cpu_s": cpu, "wall_s": wall,
                      "held_median_us": 0.0, "held_p90_us": 0.0}))  # fmt: skip


if __name__ == "__main__":
    main()
