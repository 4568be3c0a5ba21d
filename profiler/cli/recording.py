"""``nprof record``'s recording, once its arguments and target were checked (``record.py``): attach to the
pid (or spawn the command), sample until the duration ends, Ctrl-C, SIGTERM or the target exits, then
write the profile and its session file. Imports the engine: ``record.run`` imports it (``engine.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time

from profiler.atomic import check_writable, is_stream, output_label
from profiler.binary.objfile import ObjectFileCache
from profiler.cli.record import AgentFactory, command_exit_code, export_config, session_path_for
from profiler.cli.status import StatusLine, error_summary, top_table
from profiler.cli.stop import SetupInterrupted, StopFlag
from profiler.config import ExportConfig, SamplerConfig, SamplingPriority
from profiler.errors import OutputError, UsageError
from profiler.export.base import Exporter, infer_format, write
from profiler.export.session import SessionExporter
from profiler.profile.session import Session, SessionMeta
from profiler.sampling import niceness, priority
from profiler.sampling.frame_names import name_frames
from profiler.sampling.sampler import EndReason, Sampler
from profiler.symbolize.prefetch import FEED_INTERVAL, DwarfPrefetch
from profiler.target import procfs
from profiler.target.launch import LaunchedCommand
from profiler.target.tracing_thread import TracingThread
from profiler.tree.calltree import command_line


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


def record(
    args: argparse.Namespace, config: SamplerConfig, command: list[str], pid: int | None, agent_factory: AgentFactory
) -> int:
    """The recording of ``pid``, or of ``command`` (the one that is not None/empty), as checked by ``record.run``."""
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
            if child is not None:
                pid = child.pid
            assert pid is not None
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
    # the frames' DWARF read meanwhile, not after the end; the worker is started at the first feed, not
    # before the first ticks (a launched command's first instructions are sampled then)
    prefetch = DwarfPrefetch()
    fed = 0.0 if sampler.config.native else math.inf  # (ticks' times: since the start)
    try:
        for tick in sampler.run(stop):
            status.update(tick)
            if tick.time >= fed + FEED_INTERVAL:
                fed = tick.time
                started = prefetch.running or prefetch.start()
                if not started or not prefetch.feed(sampler.session.frames.columns(), sampler.modules.objects):
                    fed = math.inf
    except Exception as e:
        failure = e
    finally:
        prefetch.close()
        status.clear()
        sampler.close(detach=False)
    return failure


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


