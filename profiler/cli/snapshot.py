"""``nprof dump``'s snapshot, once its arguments and target were checked (``dump.py``): every thread's current
interleaved stack, printed now, under a header naming its process; with ``--subprocesses``, the same for every
descendant of the process, each under its own header.

All threads are stopped together (``Tracer.hold``) for one consistent snapshot: registers, stacks, the
runtime's frame chains and, with ``--locals``, the Python frames' local variables are read while the
process (and its descendants) is paused, then every thread is resumed and the copies are unwound and named.

Each thread is first stopped alone and resumed at once, copied by the runtime agent and, with native
frames, unwound (``Sampler.prepare_hold``): the agent's code is warm and the code objects on the stacks
decoded, the unwind tables are loaded and each thread's own stack is known before the hold, so the hold
lasts little more than its copies.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson

from profiler.binary.objfile import ObjectFileCache
from profiler.cli.dump import DUMP_STACK_BYTES
from profiler.cli.record import AgentFactory
from profiler.config import SamplerConfig
from profiler.model import FrameInfo, FrameKind, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.runtime import Agent
from profiler.sampling.frame_names import name_frames
from profiler.sampling.sampled_process import SampledProcess
from profiler.sampling.sampler import Sampler
from profiler.target import procfs, syscalls
from profiler.target.capture import Capture, SeizedThread
from profiler.target.tracing_thread import TracingThread
from profiler.tree.calltree import command_line
from profiler.tree.display import StackDisplays
from profiler.tree.frame_identity import frame_label

#: proc(5) state letters, as words
STATE_NAMES = {"R": "running", "S": "sleeping", "D": "disk sleep", "T": "stopped", "t": "tracing stop",
               "Z": "zombie", "X": "dead", "I": "idle"}  # fmt: skip


#: walks that end for these reasons reached the outermost frame, or were not made: nothing to say
_WHOLE = (StopReason.END_OF_STACK, StopReason.NO_STACK_COPY, StopReason.REUSED)


@dataclass
class DumpFrame:
    info: FrameInfo
    python: bool
    address: int | None = None  #: native frames: the pc looked up (return address - 1 for callers)
    locals: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class DumpThread:
    tid: int
    name: str
    state: str
    holds_gil: bool | None
    waiting_for_gil: bool
    frames: list[DumpFrame]  #: innermost first
    #: why there are no frames: the thread did not stop in time (uninterruptible sleep, where a hung
    #: program often is), with the kernel function it waits in where /proc says
    unstopped: str | None = None
    #: why the native walk ended before the outermost frame, and what to do about it; None if it did not
    walk_stopped: str | None = None


@dataclass
class DumpProcess:
    pid: int
    name: str  #: the kernel's name for it (comm)
    command: list[str]
    parent: int | None  #: the dumped process it is a child of; None for the process asked for
    threads: list[DumpThread]  #: by thread id


def snapshot(
    pid: int,
    native: bool,
    with_locals: bool,
    agent_factory: Callable[[ObjectFileCache], Sequence[Agent]],
    stack_bytes: int = DUMP_STACK_BYTES,
    subprocesses: bool = False,
) -> tuple[Session, list[DumpProcess]]:
    session = Session(SessionMeta(pid=pid, command=procfs.read_cmdline(pid), rate=0.0, stack_bytes=stack_bytes))
    objects = ObjectFileCache()
    # one fixed window: a dump copies each thread in one held stop, with no later sample to widen it for
    config = SamplerConfig(native=native, interrupt_sleeping=True, stack_bytes=stack_bytes, max_stack_bytes=0)
    sampler = Sampler(session, config, objects=objects, agents=agent_factory(objects),
                      notice=lambda m: print(f"nprof: {m}", file=sys.stderr))  # fmt: skip
    with TracingThread() as tracing:  # its end detaches the target, without stopping it again
        states, gil, missing, local_vars, family, names = tracing.call(_hold, sampler, pid, native, with_locals,
                                                                       subprocesses)  # fmt: skip
    for message in name_frames(session, sampler.modules.objects, sampler.processes.agent_sessions):
        print(f"nprof: {message}", file=sys.stderr)
    threads: dict[int, list[DumpThread]] = {p: [] for p in family}
    kinds = session.frames.kinds()
    displays = StackDisplays(session, lambda frame: True)
    for (thread, stack, stop, cls), _n in session.samples.items():
        t = session.threads[thread]
        frames: list[DumpFrame] = []
        runtime_locals = local_vars.get(t.tid, [])
        python_seen = 0
        for fid, info in reversed(displays.pairs(session.stacks.frames(stack))):
            python = int(kinds[fid]) == FrameKind.RUNTIME
            frame = DumpFrame(info, python, None if python else _avma(session, fid))
            if python:
                if python_seen < len(runtime_locals):
                    frame.locals = runtime_locals[python_seen]
                python_seen += 1
            frames.append(frame)
        threads[t.pid].append(DumpThread(t.tid, t.name, STATE_NAMES.get(states.get(t.tid, "?"), "?"),
                                         gil.get(t.tid), cls == SampleClass.GIL_WAIT, frames,
                                         walk_stopped=_walk_stopped(StopReason(stop), stack_bytes)))  # fmt: skip
    for record, state, wchan in missing:  # threads that never reported their stop: still listed, with why
        if state is not None and state not in procfs.EXITED_STATES:
            why = f"did not stop in time: {STATE_NAMES.get(state, state)}"
            why += f", waiting in the kernel's {wchan}" if wchan and wchan != "0" else ""
            threads[record.pid].append(DumpThread(record.tid, procfs.read_comm(record.pid, record.tid) or record.name,
                                                  STATE_NAMES.get(state, "?"), None, False, [], why))  # fmt: skip
    processes = [DumpProcess(p, names[p], session.meta.processes.get(p, []), parent,
                             sorted(threads[p], key=lambda d: d.tid)) for p, parent in family.items()]  # fmt: skip
    return session, processes


class _Held(NamedTuple):
    """What ``_hold`` learnt while the threads were stopped, by thread id."""

    states: dict[int, str]  #: the state letter of /proc, "T" for a job-control stop
    gil: dict[int, bool | None]  #: holds the GIL (None: not known)
    missing: list[tuple[SeizedThread, str | None, str]]  #: did not stop: with its state and wait channel
    local_vars: dict[int, list[list[tuple[str, str]]]]  #: each Python frame's locals, innermost first
    family: dict[int, int | None]  #: the processes dumped, in order: pid -> its parent's (None: the one asked for)
    names: dict[int, str]  #: pid -> the kernel's name for the process (comm)


def _hold(sampler: Sampler, pid: int, native: bool, with_locals: bool, subprocesses: bool) -> _Held:
    """On the tracing thread: attach (with ``subprocesses``, to every descendant too), copy every thread in
    one held stop, record the copies and end the tracing. Returns each thread's state letter, whether it
    holds the GIL, the threads that did not stop (with their state and kernel wait channel), each thread's
    Python locals, and the processes dumped."""
    sampler.add_process(pid)
    family: dict[int, int | None] = {pid: None}
    if subprocesses:
        family.update(sampler.processes.follow_descendants())
    targets = [sampler.targets[p] for p in family]
    locals_of = {t.process.pid: t.caps.locals.locals for t in targets if with_locals and t.caps.locals is not None}
    local_vars: dict[int, list[list[tuple[str, str]]]] = {}
    # not a thread in uninterruptible sleep, which stops for neither and would make the dump wait twice
    live = [r for p in family for r in sampler.tracer.seized.sync(p)]
    sampler.prepare_hold([r for r in live if r.proc.state() != procfs.DISK_SLEEP])
    # listed again: threads started meanwhile are dumped too (a thread per request)
    records = [r for p in family for r in sampler.tracer.seized.sync(p)]
    states = {r.tid: r.proc.state() or "?" for r in records}
    with sampler.tracer.hold(records, copy_stack=native) as captures:
        # Threads that did not stop (in the kernel's uninterruptible sleep: a vfork parent, a stuck
        # filesystem), with their state when the hold gave up on them: read after the hold, a thread woken
        # meanwhile was said to have been "running". (They went unlisted when their stop came after the
        # hold, and the end of tracing dropped them: ``gone``.)
        captured = {c.thread.tid for c in captures}
        missing = [(r, r.proc.state(), procfs.read_text(f"/proc/{r.pid}/task/{r.tid}/wchan") or "")
                   for r in records if r.tid not in captured and not r.gone]  # fmt: skip
        # Every thread is stopped now: a walk of the runtime's thread lists sees them as they are, and
        # maps threads started since the agent's first walk (a server's thread per request: on 3.8,
        # 12 of 20 threads showed no Python frame, mapped from a walk made before the attach ended)
        for target in targets:
            if target.caps.refreshes is not None:
                target.caps.refreshes.refresh(force=True)
        for c in captures:
            c.agent_data = sampler.agent_capture(c.thread, c.slot.regs)
        for c in captures:
            locals_of_process = locals_of.get(c.thread.pid)
            if locals_of_process is not None and c.agent_data is not None:
                local_vars[c.thread.tid] = locals_of_process(c.agent_data)
    gil = {c.thread.tid: _holds_gil(sampler.targets[c.thread.pid], c) for c in captures}
    for c in captures:
        states[c.thread.tid] = _state_at_stop(c)
    for c in captures:
        sampler.record(c)
    names = {p: sampler.targets[p].process.comm for p in family}
    sampler.close(detach=False)
    return _Held(states, gil, missing, local_vars, family, names)


def _holds_gil(target: SampledProcess, capture: Capture) -> bool | None:
    """Whether the thread of ``capture`` holds its runtime's lock (None: not known)."""
    lock = target.caps.lock
    return lock.holds_gil(capture.agent_data) if lock is not None and capture.agent_data is not None else None


def _state_at_stop(capture: Capture) -> str:
    """A held thread's state as its stop shows it: "T" in a job-control stop (which the seize shows as a
    tracing stop), "S" when its registers show it asleep in the kernel (``syscalls.waiting``: interrupted
    in a wait, or just woken from one), else "R". Not /proc's letter read before the hold: the brief stops
    of ``prepare_hold`` wake each sleeper, which goes back to sleep through the kernel's restart of its
    call, and read then it was "R": two threads deadlocked in ``lock.acquire`` showed [running] in 5 dumps
    of 10; and a tracing stop is nprof's own (a signal it had yet to pass on stopped the thread as it ran:
    5 of 12 dumps of a program taking SIGPROF showed "[tracing stop]", a sweep)."""
    if capture.thread.group_stopped:
        return "T"
    return "S" if syscalls.waiting(capture.slot.regs) else "R"


def _avma(session: Session, fid: int) -> int | None:
    _kind, module, rel, _offset = session.frames.key(fid)
    if 0 <= module < len(session.modules):
        return rel + session.modules[module].bias
    return rel if module == -1 else None


def render_text(session: Session, processes: list[DumpProcess]) -> str:
    lines: list[str] = []
    for process in processes:
        if lines:
            lines.append("")
        lines.append(_process_header(process))
        for t in process.threads:
            flags = [t.state]
            if t.holds_gil:
                flags.append("holds the GIL")
            elif t.waiting_for_gil:
                flags.append("waiting for the GIL")
            lines.append("")
            lines.append(f"Thread {t.tid} ({t.name}) [{', '.join(flags)}]")
            if t.unstopped:
                lines.append(f"    (no stack: the thread {t.unstopped})")
            for f in t.frames:
                lines.append(f"    {f.info.name}{_where(f.info)}")
                for name, value in f.locals:
                    lines.append(f"        {name} = {value}")
            if t.walk_stopped:
                lines.append(f"    ... (the native walk stopped here: {t.walk_stopped})")
    return "\n".join(lines)


def _process_header(process: DumpProcess) -> str:
    """``Process PID (name), child of PARENT, N threads: command line``."""
    parts = [f"Process {process.pid} ({process.name or '?'})"]
    if process.parent is not None:
        parts.append(f"child of {process.parent}")
    n = len(process.threads)
    parts.append(f"{n} thread" if n == 1 else f"{n} threads")
    return f"{', '.join(parts)}: {command_line(process.command)}"


def _walk_stopped(stop: StopReason, stack_bytes: int) -> str | None:
    """Why a walk ended early, with what to do about it where something can be done; None for a walk that
    reached the outermost frame, or was not made."""
    if stop in _WHOLE:
        return None
    if stop is StopReason.WINDOW_EXHAUSTED:
        return f"{stop.label}; --stack-bytes {2 * stack_bytes} copies more"
    return stop.label


def _where(info: FrameInfo) -> str:
    """" (file:line)", " (file)" for a line unknown, " [module]" for a frame without a file, or nothing: the
    path shortened as in every output's names (``tree/source_paths.py``; whole in ``--json``)."""
    return frame_label(info, lines=True).removeprefix(info.name)


def render_json(session: Session, processes: list[DumpProcess]) -> bytes:
    doc = {
        "pid": session.meta.pid,
        "command": session.meta.command,
        "held_ms": round(session.counters.get("process_held_ns", 0) / 1e6, 3),
        "processes": [
            {
                "pid": p.pid,
                "parent": p.parent,
                "name": p.name,
                "command": p.command,
                "threads": [_thread_json(t) for t in p.threads],
            }
            for p in processes
        ],
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


def _thread_json(t: DumpThread) -> dict[str, object]:
    return {
        "tid": t.tid,
        "name": t.name,
        "state": t.state,
        "holds_gil": t.holds_gil,
        "waiting_for_gil": t.waiting_for_gil,
        **({"unstopped": t.unstopped} if t.unstopped else {}),
        **({"walk_stopped": t.walk_stopped} if t.walk_stopped else {}),
        "frames": [
            {
                "kind": "python" if f.python else "native",
                "name": f.info.name,
                "file": f.info.file,
                "line": f.info.line,
                "module": f.info.module,
                **({} if f.python else {"address": f"0x{f.address:x}" if f.address is not None else None}),
                **({"locals": [{"name": n, "value": v} for n, v in f.locals]} if f.python else {}),
            }
            for f in t.frames
        ],
    }


def print_snapshot(args: argparse.Namespace, pid: int, agent_factory: AgentFactory) -> int:
    """Take the snapshot ``dump.run`` checked the arguments of, and print it."""
    session, processes = snapshot(pid, args.native, args.locals, agent_factory, args.stack_bytes, args.subprocesses)
    held = session.counters.get("process_held_ns", 0)
    print(f"nprof: threads were held {held / 1e6:.1f} ms for this snapshot, from the first stop to the last "
          "resume", file=sys.stderr)  # fmt: skip
    if args.json:
        sys.stdout.buffer.write(render_json(session, processes) + b"\n")
    else:
        print(render_text(session, processes))
    return 0
