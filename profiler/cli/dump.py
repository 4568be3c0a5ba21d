"""``nprof dump --pid PID``: its arguments and the checks of its target that need no engine; the snapshot
itself is ``snapshot.py``, imported once these pass (``engine.py``: a wrong pid is answered before the
engine is imported).
"""

from __future__ import annotations

import argparse

from profiler.cli.engine import load_engine
from profiler.cli.record import AgentFactory, check_stack_bytes, process_of_pid
from profiler.target.eligibility import check_profilable

#: a dump stops each thread once, so it copies 16 times record's window by default: 64 KiB cut a
#: 2000-deep recursion of 200-byte frames at 293 frames, which gdb showed whole
DUMP_STACK_BYTES = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", "-p", type=int, required=True, help="the process to dump")
    p.add_argument("--locals", action="store_true", help="show each Python frame's local variables")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--subprocesses", action="store_true",
                   help="dump its descendant processes too, each under a header of its own")  # fmt: skip
    p.add_argument(
        "--native", action=argparse.BooleanOptionalAction, default=True,
        help="interleave native frames (default on); --no-native shows Python frames only",
    )  # fmt: skip
    p.add_argument("--stack-bytes", type=int, default=DUMP_STACK_BYTES,
                   help=f"stack bytes copied per thread (default {DUMP_STACK_BYTES})")  # fmt: skip


def run(args: argparse.Namespace, agent_factory: AgentFactory) -> int:
    check_stack_bytes(args.stack_bytes)
    pid = process_of_pid(args.pid)
    check_profilable(pid)
    snapshot = load_engine("profiler.cli.snapshot")
    code: int = snapshot.print_snapshot(args, pid, agent_factory)
    return code
