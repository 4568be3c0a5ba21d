"""``nprof record``: its arguments and their checks, and the checks of its target that need no engine; the
recording itself is ``recording.py``, imported once these pass (``engine.py``: a wrong pid or argument is
answered before the engine is imported).

The order of things protects the target and the data: every check that can fail (arguments, target, output
path, format) runs before attaching; the tracer detaches in ``finally``; the outputs are written even after
Ctrl-C, each atomically.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from profiler.cli.engine import load_engine
from profiler.cli.frame_options import add_frame_arguments
from profiler.config import (
    DEFAULT_MAX_STACK_BYTES,
    MAX_FRAMES,
    MAX_STACK_BYTES,
    ExportConfig,
    SamplerConfig,
    SamplingPriority,
)
from profiler.errors import UsageError
from profiler.target import procfs
from profiler.target.eligibility import check_profilable

if TYPE_CHECKING:
    from profiler.binary.objfile import ObjectFileCache
    from profiler.runtime import Agent

AgentFactory = Callable[["ObjectFileCache"], Sequence["Agent"]]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", "-p", type=int, help="attach to this running process")
    p.add_argument("-r", "--rate", type=float, default=100.0, help="samples per second per thread (default 100)")
    p.add_argument("-d", "--duration", type=float, help="seconds to record (default: until Ctrl-C or exit)")
    p.add_argument("-o", "--output", help="output file; the format follows the extension (default speedscope); "
                   "- for standard output. The session (.nprof) is written beside it, or for - or a device "
                   "to the default name (default: nprof-COMMAND-PID-YYYYMMDD-HHMMSS.speedscope.json)")
    p.add_argument("-f", "--format", help="output format: speedscope, folded or nprof (default: from -o)")
    p.add_argument(
        "--native", action=argparse.BooleanOptionalAction, default=True,
        help="copy and unwind native stacks (default on); --no-native samples managed frames only",
    )  # fmt: skip
    p.add_argument("--idle", action="store_true",
                   help="include samples of idle and blocked threads, and of threads waiting for the GIL")
    p.add_argument("--gil", action="store_true", help="keep only samples of the thread holding the GIL")
    p.add_argument(
        "--hide-interpreter", action="store_true",
        help="hide the interpreter's own frames: those between its eval loop and C calls, and its start-up "
        "before the first Python frame (kept by default)",
    )  # fmt: skip
    p.add_argument("--threads", action="store_true", help="keep threads apart in folded output")
    add_frame_arguments(p)
    p.add_argument(
        "--subprocesses", action="store_true",
        help="also profile the target's child processes as they appear (each labelled with pid and command)",
    )  # fmt: skip
    p.add_argument(
        "--stack-bytes", type=int, default=SamplerConfig.stack_bytes,
        help="bytes of stack a thread's copies start with, from the stack pointer up (default "
        f"{SamplerConfig.stack_bytes}); a thread whose native stack goes on past it copies twice as much "
        "from its next sample, up to --max-stack-bytes",
    )  # fmt: skip
    p.add_argument(
        "--max-stack-bytes", type=int, default=DEFAULT_MAX_STACK_BYTES,
        help=f"the most stack bytes a thread's copies grow to (default {DEFAULT_MAX_STACK_BYTES}; at or below "
        "--stack-bytes, the window stays fixed)",
    )  # fmt: skip
    p.add_argument(
        "--max-frames", type=int, default=SamplerConfig.max_frames,
        help=f"native frames unwound per sample at most (default {SamplerConfig.max_frames})",
    )  # fmt: skip
    p.add_argument(
        "--priority", choices=[c.value for c in SamplingPriority], default=SamplingPriority.AUTO.value,
        help="the sampler's scheduling from its sleep to the end of each tick's stops: auto raises it to "
        "SCHED_FIFO when permitted (else a notice: bursts of work on a shared CPU are undercounted), "
        "fifo insists on it, normal never changes it, nor nprof's nice value, which auto and fifo raise to "
        "-20 when permitted (default auto)",
    )  # fmt: skip
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...: spawn and profile a command")

def check_duration(seconds: float, hint: str) -> None:
    """-d/--duration is a positive, finite number of seconds (``hint`` says what to give instead)."""
    if not 0 < seconds < math.inf:  # also false for nan
        raise UsageError(f"--duration {seconds:g} is not a positive number of seconds.", hint)

def check_stack_bytes(size: int, flag: str = "--stack-bytes") -> None:
    """--stack-bytes (record's and dump's) and --max-stack-bytes are 1 to MAX_STACK_BYTES."""
    if not 0 < size <= MAX_STACK_BYTES:
        raise UsageError(f"{flag} {size} is out of range.", f"Give 1 to {MAX_STACK_BYTES} bytes.")

def sampler_config(args: argparse.Namespace) -> SamplerConfig:
    if not 1 <= args.rate <= 100_000:  # also false for nan
        raise UsageError(f"--rate {args.rate:g} is out of range.", "Give a rate in samples per second, 1 to 100000.")
    if args.duration is not None:
        check_duration(args.duration, "Give the recording time in seconds, or leave -d out to record until Ctrl-C "
                                      "or exit.")  # fmt: skip
    check_stack_bytes(args.stack_bytes)
    check_stack_bytes(args.max_stack_bytes, "--max-stack-bytes")
    if not 1 <= args.max_frames <= MAX_FRAMES:
        raise UsageError(f"--max-frames {args.max_frames} is out of range.", f"Give 1 to {MAX_FRAMES} frames.")
    return SamplerConfig(
        rate=args.rate,
        duration=args.duration,
        stack_bytes=args.stack_bytes,
        max_stack_bytes=args.max_stack_bytes,
        max_frames=args.max_frames,
        native=args.native,
        idle=args.idle,
        priority=SamplingPriority(args.priority),
        interrupt_sleeping=args.idle,
        subprocesses=args.subprocesses,
    )

def export_config(args: argparse.Namespace) -> ExportConfig:
    return ExportConfig(idle=args.idle, threads=args.threads, gil_only=args.gil,
                        hide_interpreter=args.hide_interpreter, lines=args.lines)  # fmt: skip

def session_path_for(output: str) -> str:
    """The .nprof kept beside every output file: ``out.speedscope.json`` -> ``out.nprof``."""
    base = output
    for ending in (".speedscope.json", ".json", ".folded", ".collapsed", ".txt", ".svg", ".pb.gz", ".nprof"):
        if base.lower().endswith(ending):
            base = base[: -len(ending)]
            break
    return base + ".nprof"


def run(args: argparse.Namespace, agent_factory: AgentFactory = lambda objects: ()) -> int:
    """Check the arguments and, with --pid, the target; then record (``recording.record``)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if (args.pid is None) == (not command):
        raise UsageError(
            "Give either --pid PID or a command after --.",
            "Examples: `nprof record --pid 1234`, `nprof record -o out.speedscope.json -- python app.py`.",
        )
    config = sampler_config(args)
    pid = None
    if args.pid is not None:
        pid = process_of_pid(args.pid)
        check_profilable(pid)
    recording = load_engine("profiler.cli.recording")
    code: int = recording.record(args, config, command, pid, agent_factory)
    return code


def process_of_pid(pid: int) -> int:
    """The process ``--pid`` names, saying so when it was the id of one of its threads (``top -H`` lists
    them): recorded under the thread's id, the whole process was labelled with it, and the recording
    ended as the thread exited while the process ran on."""
    status = procfs.read_status(pid)
    if status is None or status.tgid == pid:
        return pid  # (a pid that is gone is reported by the checks that follow)
    leader = procfs.read_status(status.tgid)
    if leader is not None and leader.state == "Z":
        return pid  # a main thread that called pthread_exit: ptrace can attach through a live thread only
    print(f"nprof: {pid} is a thread of process {status.tgid} ({procfs.read_comm(status.tgid)}); profiling "
          "the whole process", file=sys.stderr)  # fmt: skip
    return status.tgid


def command_exit_code(status: int | None) -> int:
    """The exit code that reports a command's end as a shell does: its own exit code, or 128 + the number
    of the signal that killed it (``status`` is an exit code, or minus a signal, or None if unknown: 0)."""
    if status is None:
        return 0
    return 128 - status if status < 0 else status
