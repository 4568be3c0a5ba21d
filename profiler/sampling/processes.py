"""The set of processes a recording samples: one ``SampledProcess`` per pid (its address space, unwinder and runtime
agent). A process joins when it is attached (``add``), when it is born a child of one (``--subprocesses``:
found by a look at its parent's children, or seized when its parent exits, ``Tracer.orphans``), and
again, as a new SampledProcess under its old pid, when it execs: at once for a process seized with
PTRACE_O_TRACEEXEC (the one nprof was pointed at or started, and children with --subprocesses), which
waits in its exec stop while it is mapped; at the next scan for others. A process that was just started
may load its runtime later than its first look (libpython is mapped after exec), so its detection is
retried for a grace period (``sampled_process.py``) before it is profiled natively, with a notice saying why.

The sampler asks for ``look_again`` between ticks; nothing here runs while a thread is stopped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from profiler.binary.objfile import ObjectFileCache
from profiler.config import SamplerConfig
from profiler.errors import NprofError
from profiler.profile.session import Session
from profiler.runtime import Agent, AgentSession
from profiler.sampling.children import ChildWatcher, program_identity
from profiler.sampling.sampled_process import SampledProcess
from profiler.target.process import TargetProcess, shares_memory
from profiler.target.procfs import children_of, exe_path, process_alive, thread_start_time
from profiler.target.tracer import Tracer
from profiler.unwind.address_space import AddressSpace, ModuleRegistry


class SampledProcesses:
    """The Targets of a recording, by pid (``targets``, a dict the sampler and its agent calls share), and
    the modules they map (``modules``, one registry: a library mapped by several processes is one module)."""

    def __init__(
        self,
        session: Session,
        config: SamplerConfig,
        tracer: Tracer,
        objects: ObjectFileCache,
        agents: Sequence[Agent],
        notice: Callable[[str], None],
    ) -> None:
        self.session = session
        self.config = config
        self.tracer = tracer
        self.objects = objects
        self.agents = list(agents)
        self.notice = notice  #: a message for the user, also kept in the session
        self.modules = ModuleRegistry()
        self.targets: dict[int, SampledProcess] = {}
        #: every agent session of the recording by its label in ``session.agents`` ("cpython:PID"), kept
        #: after its process exits or execs: the symbolizer names each runtime frame with the session that
        #: captured it, since code addresses mean nothing in another process
        self.agent_sessions: dict[str, AgentSession] = {}
        self.children = ChildWatcher()
        #: some target has a runtime agent, so the stops need the agent hooks: recomputed where targets or
        #: their agents change, not asked of every target each tick
        self.any_agent = False
        #: children that could not be followed, told once: pid -> its start time (a pid reused by another
        #: process is tried again). An orphan among them stays seized as it is, and is detached at the end
        self._not_followed: dict[int, int | None] = {}
        #: processes let go at an exec of a program nprof does not profile: pid -> why (the summary says so,
        #: where the recording ended with them)
        self.released: dict[int, str] = {}

    def add(
        self, pid: int, fresh: bool = False, trace_exec: bool = False, at_exec: bool = False, orphan: bool = False
    ) -> SampledProcess:
        """Validate, seize every thread, map modules and detect a managed runtime.

        ``fresh``: the process was just started (a new child): its runtime may not be loaded yet, so
        detection is retried for a while. ``trace_exec``: its execs are mapped while it waits in the exec
        stop (``after_execs``), so no sample of its new program is unwound with the old one's modules.
        ``at_exec``: a command nprof started (``launch.py``), already seized and waiting in its exec stop;
        it is resumed once mapped, whatever happens, so its first instruction can be sampled. ``orphan``: a
        child seized at its parent's exit (``Tracer.orphans``), seized already; it runs meanwhile.
        """
        try:
            program = program_identity(pid)  # before anything of it is read: an exec before the seize is told below
            process = TargetProcess(pid)
            # Everything slow (maps, ELF and symbol tables, runtime detection) happens before the seize: once
            # seized, a signal to the target waits in a signal-delivery-stop until nprof answers it. What it
            # finds is told once the seize is done: "profiling native frames" came before the error that
            # the process could not be traced at all.
            held: list[str] = []
            told, self.notice = self.notice, held.append
            try:
                target = self._make_target(process, fresh)
                if process.job_stopped:
                    self.notice(
                        f"pid {pid} ({process.comm}) is stopped (SIGSTOP, SIGTSTP or Ctrl-Z), and nprof leaves "
                        "it so: its threads stay where they stopped, and a recording counts them as idle "
                        f"(--idle shows them) until it is continued (kill -CONT {pid})."
                    )
            finally:
                self.notice = told
            self.tracer.add_process(process, trace_exec, at_exec, orphan)
            for message in held:
                self.notice(message)
            self.targets[pid] = target
            if not at_exec and program_identity(pid) != program:
                # it exec'd while it was read, before the seize, so no exec stop tells of it: a fork child
                # found just before its exec (``--subprocesses``) kept its parent's program, its label and
                # runtime, and showed no Python frames of its own
                self.session.count("processes_exec_while_attached")
                self._remap(target)
                target = self.targets[pid]
            self.children.remember(pid)
            self._note_agents()
            return target
        finally:
            if at_exec:
                self.tracer.resume_exec(pid)

    def after_execs(self) -> None:
        """Map the new program of each process waiting in its exec stop, then let it run."""
        for pid in list(self.tracer.exec_stopped):
            try:
                target = self.targets.get(pid)
                if target is None:
                    continue
                if target.dormancy is not None:
                    # the exec ends every other thread and the program: the samples deferred so far count the
                    # old stacks, and a target let go below is no longer there to flush at the end
                    target.dormancy.wake_all()
                if not self._let_go_if_foreign(target):
                    self._remap(target)
                    self.children.remember(pid)  # the scan must not take this exec for another
                self._note_agents()
            finally:
                self.tracer.resume_exec(pid)  # (no-op for one let go)
            for record in self.tracer.seized.threads_of(pid):
                if record.user is not None:
                    record.user.exec_resumed(record.proc.schedstat())

    def _let_go_if_foreign(self, target: SampledProcess) -> bool:
        """A process that exec'd a program of another architecture is detached from its exec stop and no
        longer sampled, with a notice; it runs on unprofiled. Unwound with x86-64 rules, its stacks were
        wrong, with nothing said (a sweep: a shell that exec'd a 32-bit program)."""
        pid = target.process.pid
        problem = target.process.foreign_architecture()
        if problem is None:
            return False
        self.notice(f"pid {pid} ({target.process.comm}) exec'd {exe_path(pid) or '?'}, {problem}: nprof profiles "
                    "x86-64 programs only; it runs on unprofiled from here")  # fmt: skip
        self.tracer.release_exec(pid)
        self.released[pid] = problem
        del self.targets[pid]
        return True

    def look_again(self) -> None:
        """Between ticks, at most every ``children.SCAN_INTERVAL``: children born and processes that exec'd
        since the last look, and runtimes that fresh processes have loaded since; the runtimes of processes
        started just now at every call (``sampled_process.DETECT_SOON``)."""
        scan = self.children.due()
        if scan:
            self._follow_children()
            self._detect_loaded_later()
        elif not self._detection_soon():
            return
        self._retry_detection()
        self._note_agents()  # an exec may have replaced a target, a fresh one may have found its runtime

    def _detect_loaded_later(self) -> None:
        """Look again for the runtime of each process profiled natively that has mapped new code since its
        last look (``SampledProcess.loaded_since``), and tell the user when one is found: its frames are read from
        there on, and its earlier samples have native frames only."""
        for target in self.targets.values():
            if target.detection_pending or not target.loaded_since():
                continue
            told = target.detect_reasons
            if target.detect(self.agents, self._register_agent) and target.agent is not None:
                reports = target.caps.reports
                p, label = target.process, reports.label if reports is not None else target.agent.name
                before = "show native frames only" if self.config.native else "have no frames of it"
                self.notice(f"pid {p.pid} ({p.comm}): {label} loaded since nprof attached: its frames are read "
                            f"from here on (its earlier samples {before})")  # fmt: skip
            elif target.detect_reasons != told:  # a runtime nprof cannot read (CPython 3.7), loaded since
                self.notice(target.no_runtime_notice(self.config.native))

    def _detection_soon(self) -> bool:
        """Some process started just now still waits for its runtime."""
        now = time.monotonic()
        return any(t.detection_soon(now) for t in self.targets.values())

    def give_up_detection(self) -> None:
        """At the end: processes still waiting for their runtime are profiled natively, and the user is told;
        not about a child that exited meanwhile (a short-lived child, run before its runtime was even mapped:
        `python -m json.tool` under `python -m test`), which was profiled natively for all its life. The
        process nprof was pointed at is told of, exited or not: a command shorter than the recording."""
        for target in self.targets.values():
            if target.detection_pending:
                # (called after every detach: an exit status is all there is to tell an exited process by)
                self._no_runtime(target, exited=target.process.pid in self.tracer.seized.exit_status)

    def _register_agent(self, agent: AgentSession, pid: int) -> int:
        """The index in ``session.agents`` of a newly found agent session: its own label, even where the same
        pid had another program before an exec."""
        label, again = f"{agent.name}:{pid}", 1
        while label in self.agent_sessions:
            again += 1
            label = f"{agent.name}:{pid}:{again}"
        self.agent_sessions[label] = agent
        return self.session.agent_index(label)

    def _note_agents(self) -> None:
        self.any_agent = any(target.agent is not None for target in self.targets.values())

    def _make_target(self, process: TargetProcess, fresh: bool = False) -> SampledProcess:
        target = SampledProcess(process, AddressSpace(process, self.objects, self.modules), self.config)
        if not target.detect(self.agents, self._register_agent, fresh) and not target.detection_pending:
            self._no_runtime(target)
        self.session.meta.processes[process.pid] = process.cmdline
        self.session.modules = self.modules.modules
        return target

    def _remap(self, target: SampledProcess) -> None:
        """Same pid, new program: its modules and runtime are all different now."""
        target.process.after_exec()
        self.targets[target.process.pid] = self._make_target(target.process, fresh=True)

    def _retry_detection(self) -> None:
        """Fresh processes without a runtime yet: look again, until the grace period ends."""
        now = time.monotonic()
        for target in self.targets.values():
            if not target.detection_pending:
                continue
            target.process.refresh_maps()
            if not target.detect(self.agents, self._register_agent) and now >= target.detect_until:
                self._no_runtime(target)

    def _no_runtime(self, target: SampledProcess, exited: bool = False) -> None:
        """Stop looking for a runtime in ``target`` and say why it is profiled natively; not for a child that
        ``exited`` or whose maps are empty (it is exiting: a pool's forked worker ending, its runtime found
        "not mapped"), which is only counted: nothing is left to profile. The process nprof was pointed at
        is always told of, exited or not (a command that ran for less than the recording)."""
        target.detect_until = 0.0
        exiting = exited or not target.process.maps.mappings
        if exiting and target.process.pid != self.session.meta.pid:
            self.session.count("processes_exited_before_detection")
            return
        if target.detect_reasons:
            self.notice(target.no_runtime_notice(self.config.native))

    def _follow_children(self) -> None:
        """Attach children that appeared, and re-map processes that exec'd (--subprocesses)."""
        seized = self.tracer.seized
        for pid, target in list(self.targets.items()):
            if not seized.process_alive(pid):
                continue
            if self.children.exec_happened(pid):
                self._remap(target)
            if not self.config.subprocesses:
                continue
            # (orphans are seized already, and followed below)
            for child in self._new_children(pid) - self.tracer.orphans.keys():
                if not self._told(child) and not shares_memory(pid, child):  # (a vfork child: at the next look)
                    self._follow(child)
        self.follow_orphans()

    def follow_orphans(self) -> bool:
        """Make a SampledProcess of each child seized at its parent's exit (``Tracer.orphans``); not of a vfork
        child before its exec, which runs in its parent's memory. True if one was added. Called by every
        look for children, and at once when no other process is left (a daemon's parents exited)."""
        added = False
        for child, parent in list(self.tracer.orphans.items()):
            if not self._told(child) and not (parent in self.targets and shares_memory(parent, child)):
                added |= self._follow(child, orphan=True)
        return added

    def follow_descendants(self) -> dict[int, int]:
        """Follow every descendant of the processes followed now, children of children included, as they are
        at this moment: the one look of ``nprof dump --subprocesses``, where a recording looks again every
        ``SCAN_INTERVAL`` (``look_again``). Returns each process followed so, with its parent's pid. A vfork
        child before its exec, which runs in its parent's memory, is left out, as a recording leaves it, and
        so is nprof itself (``nprof dump --pid $$ --subprocesses`` from a shell)."""
        found: dict[int, int] = {}
        parents = sorted(self.targets)
        while parents:
            pid = parents.pop(0)
            for child in sorted(self._new_children(pid)):
                if not shares_memory(pid, child) and self._follow(child, fresh=False):
                    found[child] = pid
                    parents.append(child)
        return found

    def _new_children(self, pid: int) -> set[int]:
        """The children of ``pid`` not followed yet, but nprof itself: a child of the shell it was given."""
        tids = [r.tid for r in self.tracer.seized.threads_of(pid)]
        return children_of(pid, tids) - self.targets.keys() - {os.getpid()}

    def _follow(self, child: int, orphan: bool = False, fresh: bool = True) -> bool:
        """Make a SampledProcess of ``child`` (``orphan``: seized already; ``fresh``: born since the last look,
        its runtime may be loaded later, ``add``); False if it could not be. One that exited
        first is the usual end of a short-lived child, and no news; any other reason is told once, with the
        error's advice (another tracer has it: which one). Each look for children found such a child
        again, and said so again, with the reason left out."""
        try:
            self.add(child, fresh=fresh, orphan=orphan)
            return True
        except NprofError as e:
            if not process_alive(child):
                self.tracer.orphans.pop(child, None)
                self.session.count("children_exited_before_attach")
            else:
                self._not_followed[child] = thread_start_time(child, child)
                self.session.count("children_not_followed")
                self.notice(f"not following child {child}: {e}")
            return False

    def _told(self, child: int) -> bool:
        """Whether ``child`` was found not followable already (and is the same process)."""
        return child in self._not_followed and self._not_followed[child] == thread_start_time(child, child)
