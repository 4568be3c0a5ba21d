"""``nprof record``: attach to a pid (or spawn a command), sample until the duration ends, Ctrl-C, SIGTERM
or the target exits, then write the profile and its session file.

The order of things protects the target and the data: every check that can fail (output path, format,
arguments) runs before attaching; the tracer detaches in ``finally``; the outputs are written even after
Ctrl-C, each atomically.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

from profiler.atomic import check_writable, is_stream, output_label
from profiler.binary.objfile import ObjectFileCache
from profiler.cli.frame_options import add_frame_arguments
from profiler.cli.status import StatusLine, error_summary, top_table
from profiler.cli.stop import SetupInterrupted, StopFlag
from profiler.config import (
    DEFAULT_MAX_STACK_BYTES,
    MAX_FRAMES,
    MAX_STACK_BYTES,
    ExportConfig,
    SamplerConfig,
    SamplingPriority,
)
from profiler.errors import OutputError, UsageError
from profiler.export.base import Exporter, infer_format, write
from profiler.export.session import SessionExporter
from profiler.profile.session import Session, SessionMeta
from profiler.runtime import Agent
from profiler.sampling import niceness, priority
from profiler.sampling.frame_names import name_frames
from profiler.sampling.sampler import EndReason, Sampler
from profiler.symbolize.prefetch import FEED_INTERVAL, DwarfPrefetch
from profiler.target import procfs
from profiler.target.launch import LaunchedCommand
from profiler.target.tracing_thread import TracingThread
from profiler.tree.calltree import command_line


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


def _session_path(output: str, name: str, pid: int) -> str:
    """Where the session file goes: beside the output file, or for an output written through as a stream
    (``-``, ``/dev/stdout``, a FIFO: ``atomic.is_stream``) under the default name in the current directory,
    not beside it (``/dev/stdout.nprof``)."""
    if is_stream(output):
        return _default_output(name, pid, SessionExporter())
    return session_path_for(output)


#: how long nprof gives its command, after a Ctrl-C while it waits for it, to end of the same Ctrl-C (a
#: terminal's reaches the whole process group): "runs on" was said of a command that exited 0.2 s later.
#: Python programs exited 1-14 ms after a SIGINT here (3.8, 3.11, 3.13); the rest is for a program's own
#: clean-up
INTERRUPT_GRACE = 0.5

AgentFactory = Callable[[ObjectFileCache], Sequence[Agent]]


def run(args: argparse.Namespace, agent_factory: AgentFactory = lambda objects: ()) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if (args.pid is None) == (not command):
        raise UsageError(
            "Give either --pid PID or a command after --.",
            "Examples: `nprof record --pid 1234`, `nprof record -o out.speedscope.json -- python app.py`.",
        )
    config = sampler_config(args)
    priority.require(config.priority)  # --priority fifo without permission: say so before attaching
    if config.priority is SamplingPriority.NORMAL:
        niceness.restore()  # raised at nprof's start (``entry.py``)
    export = export_config(args)
    exporter: Exporter | None = None
    if args.output is not None:
        exporter = infer_format(args.output, args.format)
        check_writable(args.output)
    elif args.format is not None:
        exporter = infer_format("", args.format)
    # -o out.nprof -f folded: the session file, written beside the output, would overwrite it
    clash = args.output is not None and session_path_for(args.output) == args.output
    if clash and exporter is not None and exporter.format != "nprof":
        raise UsageError(
            f"The output {args.output} is where the session file of the recording goes (.nprof, written beside "
            "every output).",
            f"Give the {exporter.format} output a name of its own, such as {args.output[:-len('.nprof')]}"
            f"{exporter.extensions[0]}.",
        )

    stop = StopFlag()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # nprof's own, which the command starts with
    with stop:  # from the fork on, a signal is a flag: it ends the set-up at its next step, the recording at a tick
        # Every ptrace call is the tracing thread's, and its end detaches the target without stopping it; the
        # handler that bounds its work at real-time priority runs on this thread
        with TracingThread(handlers={signal.SIGXCPU: priority.on_sigxcpu}) as tracing:
            stop.wake = tracing.wake
            # held before its exec; it starts at the nice nprof was started at
            child = LaunchedCommand(command, stop.ignored, mask, niceness.started_with()) if command else None
            if child is not None:
                tracing.call(child.seize)  # at once (``LaunchedCommand.seize``)
            pid = child.pid if child is not None else process_of_pid(args.pid)
            sampler: Sampler | None = None
            try:
                name = os.path.basename(command[0]) if command else procfs.read_comm(pid)
                output = args.output or _default_output(name, pid, exporter)
                exporter = exporter or infer_format(output, None)
                session_path = _session_path(output, name, pid)
                if args.output is None:
                    check_writable(output)
                if session_path != output:
                    check_writable(session_path)  # before attaching: nothing recorded is then lost to it
                session = Session(SessionMeta(pid=pid, command=command or procfs.read_cmdline(pid),
                                              rate=config.rate, stack_bytes=config.stack_bytes,
                                              max_stack_bytes=config.window_cap, native=config.native,
                                              idle_stacks=config.interrupt_sleeping))  # fmt: skip
                objects = ObjectFileCache()
                sampler = Sampler(
                    session, config, objects=objects, agents=agent_factory(objects),
                    notice=lambda m: print(f"nprof: {m}", file=sys.stderr),
                )  # fmt: skip
                stop.raise_if_stopped()  # before the command starts, or nprof attaches
                if child is not None:
                    tracing.call(child.run_to_exec)  # raises if it cannot run
                    tracing.call(sampler.add_launched, pid)
                else:
                    tracing.call(sampler.add_process, pid, trace_exec=True)
                # attached: from here on a signal ends the recording at its next tick, and what was sampled
                # (maybe nothing yet) is written, as for a signal later on
            except BaseException as e:
                if child is not None:
                    tracing.call(child.give_up)
                if stop() and not isinstance(e, KeyboardInterrupt):
                    # the signal is why (a command it killed before its exec)
                    raise SetupInterrupted(stop.signal or signal.SIGINT) from e
                raise
            print(f"nprof: recording pid {pid} ({command_line(session.meta.command, 80)}) at {config.rate:g} Hz; "
                  "Ctrl-C to stop", file=sys.stderr)  # fmt: skip
            failure = tracing.call(_sample, sampler, stop)
        # the tracing thread has ended: the target runs on, detached, while its names are resolved
        for message in name_frames(session, sampler.modules.objects, sampler.processes.agent_sessions, export):
            print(f"nprof: {message}", file=sys.stderr)
        why = _why_it_ended(sampler, stop, config) if failure is None else "stopped by an internal error"
        written = _write_outputs(session, output, session_path, exporter, export)
        _print_summary(session, why, written, export)
        if failure is not None:
            raise failure  # reported with its traceback as an internal error (``cli/main.py``)
        if child is None:  # (a launched command is waited for, and Ctrl-C ends that wait: ``_wait_child``)
            stop.ignore_on_exit()
    if child is not None:
        return _wait_child(child, pid, session)
    return 0


def _sample(sampler: Sampler, stop: StopFlag) -> Exception | None:
    """The recording, on the tracing thread: its ticks, with the status line, until the end, and the sampler's
    close. An error of nprof's own is returned, not raised: the samples taken before it are written all the
    same."""
    status = StatusLine(sampler)
    failure: Exception | None = None
    prefetch = DwarfPrefetch()  # the frames' DWARF read meanwhile, not after the end
    fed = 0.0 if sampler.config.native and prefetch.start() else math.inf  # (ticks' times: since the start)
    try:
        for tick in sampler.run(stop):
            status.update(tick)
            if tick.time >= fed + FEED_INTERVAL:
                fed = tick.time
                prefetch.feed(sampler.session.frames.columns(), sampler.modules.objects)
    except Exception as e:
        failure = e
    finally:
        prefetch.close()
        status.clear()
        sampler.close(detach=False)
    return failure


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


def _print_summary(session: Session, why: str, written: list[str], export: ExportConfig) -> None:
    """The end of a recording, on standard error like every message of nprof's while it records: standard
    output is the launched command's, or the profile's (``-o -``)."""
    out = sys.stderr
    print(f"nprof: {why}; {session.total_samples:,} samples of {len(session.threads)} thread(s) in "
          f"{session.meta.duration:.1f}s ({error_summary(session)}).", file=out)  # fmt: skip
    held = session.counters.get("stop_held_median_ns")
    if held is not None:
        p90 = session.counters.get("stop_held_p90_ns", held)
        print(f"nprof: threads were held {held / 1e3:.0f} µs per sample (median; p90 {p90 / 1e3:.0f} µs), "
              "from their stop to their resume.", file=out)  # fmt: skip
    for line in written:
        print(f"nprof: {line}", file=out)
    print(top_table(session, export), file=out)


def _default_output(name: str, pid: int, exporter: Exporter | None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = (name or "target").replace("/", "_").replace(" ", "_")
    ext = exporter.extensions[0] if exporter is not None else ".speedscope.json"
    return f"nprof-{name}-{pid}-{stamp}{ext}"


def _why_it_ended(sampler: Sampler, stop: StopFlag, config: SamplerConfig) -> str:
    """What ended the sampling: a signal that came once it had ended (a Ctrl-C to the process group while
    nprof resolved names, after the command had exited) did not end it."""
    if sampler.end_reason is EndReason.EXITED:
        pid = sampler.session.meta.pid
        problem = sampler.processes.released.get(pid)
        if problem is not None and pid not in sampler.session.meta.exit_status:
            return f"target exec'd {problem} and was let go, unprofiled"
        return _how_the_target_ended(sampler.session.meta.exit_status.get(pid))
    if sampler.end_reason is EndReason.DURATION:
        return f"recorded {config.duration:g}s"
    return f"stopped by {signal.Signals(stop.signal or signal.SIGINT).name}"


def _how_the_target_ended(status: int | None) -> str:
    """The end of the process nprof was pointed at (not of a child followed with --subprocesses, which may
    well be killed while its parent exits normally). ``status``: an exit code, or minus a killing signal."""
    if status is None:
        return "target exited"
    if status < 0:
        try:
            return f"target was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"target was killed by signal {-status}"
    return f"target exited (status {status})"


def _write_outputs(
    session: Session, output: str, session_path: str, exporter: Exporter, export: ExportConfig
) -> list[str]:
    """Write the requested output and the session file; a failure of one does not lose the other."""
    lines = []
    failures = []
    targets = [(output, exporter)]
    if session_path != output:
        targets.append((session_path, SessionExporter()))
    for path, exp in targets:
        try:
            write(session, path, exp, export)
            lines.append(f"wrote {exp.format} to {output_label(path)}")
        except OutputError as e:
            failures.append(e)
        except OSError as e:
            failures.append(OutputError(f"Cannot write {path}: {e.strerror}."))
    if failures:
        for line in lines:
            print(f"nprof: {line}", file=sys.stderr)
        raise failures[0]
    if exporter.format == "speedscope" and not is_stream(output):
        lines.append(f"open it with https://www.speedscope.app or `npx speedscope {output}`")
    return lines


def _wait_child(child: LaunchedCommand, pid: int, session: Session) -> int:
    """The spawned command is never killed: if it still runs when recording ends, wait for it. nprof then
    exits with its status, as strace and time(1) do, so that ``nprof record -- CMD`` can stand in for
    ``CMD`` in a script, a CI job or a container's entry point (py-spy always exits 0: its issues #356 and
    #717 ask for this). Ctrl-C while waiting leaves the command running and exits 130, unless the command
    ended of it too: then with its status."""
    status = session.meta.exit_status.get(pid)
    if status is None and child.running():
        try:  # (the notice inside: a Ctrl-C as soon as it shows, which woke its reader, escaped as "interrupted")
            print(f"nprof: waiting for {session.meta.command[0]} (pid {pid}) to exit", file=sys.stderr)
            child.wait()
        except KeyboardInterrupt:
            if not child.exits_within(INTERRUPT_GRACE):
                print(f"nprof: not waiting any longer; pid {pid} runs on", file=sys.stderr)
                return 128 + signal.SIGINT
    if status is None:
        status = child.returncode
    return command_exit_code(status)


def command_exit_code(status: int | None) -> int:
    """The exit code that reports a command's end as a shell does: its own exit code, or 128 + the number
    of the signal that killed it (``status`` is an exit code, or minus a signal, or None if unknown: 0)."""
    if status is None:
        return 0
    return 128 - status if status < 0 else status
