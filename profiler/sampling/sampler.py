"""The sampling loop: an iterator of ticks. Each tick decides which threads to stop, lets the tracer copy
them, and only then (with every thread running again) has ``stacks.py`` unwind, merge and count the copies.

Which threads a tick stops, and which it counts without a stop, is ``idle.py``'s decision; every call into
a runtime agent goes through ``agent_calls.py``, which keeps an agent's bug from reaching the loop; which
processes are sampled (attached, children followed, execs, runtimes detected) is ``processes.py``'s.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from profiler.binary.objfile import ObjectFileCache
from profiler.config import SamplerConfig
from profiler.profile.session import Session
from profiler.runtime import Agent
from profiler.sampling.agent_calls import AgentCalls
from profiler.sampling.dormancy import DORMANT_AFTER, MIN_THREADS, Dormancy
from profiler.sampling.gc_freeze import SurvivorFreezer
from profiler.sampling.idle import IdleCheck
from profiler.sampling.notices import (
    depth_limit_shortfall,
    no_unwind_info,
    other_stack_samples,
    rate_shortfall,
    signal_cost,
    stack_window_shortfall,
    unanchored_samples,
    undetached_threads,
    unnamed_anchors,
    unstopped_threads,
    untraced_threads,
    unwind_problems,
)
from profiler.sampling.priority import SamplingPolicy
from profiler.sampling.processes import SampledProcesses
from profiler.sampling.sampled_process import SampledProcess, SampledThread
from profiler.sampling.stacks import StackRecorder
from profiler.sampling.thread_naming import ThreadNaming
from profiler.sampling.timer import Timer
from profiler.target.capture import AgentCapture, Capture, SeizedThread
from profiler.target.procfs import printable
from profiler.target.tracer import Tracer

#: how often /proc/PID/task is listed for new threads: every tick at 100 Hz, every 10th at 1 kHz. The listing
#: is made at the start of a tick, so that a thread found is stopped in that tick. Listed after a tick's
#: stops, a thread waited a whole period more for its first sample: workers living 2-8 ms (tests'
#: churn.c, 200 Hz) got 0.39-0.49 samples a tick, against 1.27-1.35 listed first, and a 3.12 script starting
#: threads of ~1 ms got 0 samples in them in 4 s at 100 Hz, against 160-171 (py-spy: 185)
SYNC_INTERVAL = 0.01

#: a look for new threads lists /proc/PID/task at least this often, even when the process's thread count
#: says none is new (``_sync_threads``): a count can balance out when a thread that another's exec tore down
#: was never reported to nprof ("a thread torn down by another's exec", ``Tracer._handle_event``)
LIST_AT_LEAST_EVERY = 1.0

#: the shortest wait for a tick's stops: a thread on another CPU takes 25-50 us to report its stop here
MIN_WINDOW = 0.002


class EndReason(enum.Enum):
    DURATION = "duration"  #: the requested duration elapsed
    STOPPED = "stopped"  #: should_stop became true (Ctrl-C, SIGTERM, a daemon's stop)
    EXITED = "exited"  #: every target process exited


@dataclass
class Tick:
    """What one tick did; the CLI's status line and the daemon read these."""

    number: int
    time: float
    stopped: int  #: threads stopped this tick
    reused: int  #: idle or asleep threads counted without stopping them


class Sampler:
    def __init__(
        self,
        session: Session,
        config: SamplerConfig,
        tracer: Tracer | None = None,
        objects: ObjectFileCache | None = None,
        agents: Sequence[Agent] = (),
        notice: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.session = session
        self.config = config
        self.tracer = tracer or Tracer(
            config.stack_bytes, config.stop_deadline, config.window_cap, follow_exits=config.subprocesses
        )
        self.objects = objects or ObjectFileCache()
        self.notice = notice
        self.processes = SampledProcesses(session, config, self.tracer, self.objects, agents, self._notice)
        self.targets = self.processes.targets  #: pid -> SampledProcess, kept by ``processes``
        self.modules = self.processes.modules
        self.threads: dict[tuple[int, int], SampledThread] = {}
        self.timer = Timer(config.rate)
        #: monotonic time of the recording's start: ``run``'s, from which the duration counts
        self.started = time.monotonic()
        self.ticks = 0
        self.tick_seconds = 0.0  #: the time spent in ``tick``, all ticks together (``notices.rate_shortfall``)
        self.end_reason = EndReason.STOPPED
        self._next_sync = 0.0  #: monotonic time of the next look for new threads (``_sync_threads``)
        self._next_listing = 0.0  #: ... and of the next one that lists every process's threads whatever
        #: consecutive asleep checks that make a thread dormant (``dormancy.py``)
        self._dormant_after = max(1, round(DORMANT_AFTER * config.rate))
        self.priority = SamplingPolicy(config.priority)  #: real-time from each sleep to the end of its stops
        self.collector = SurvivorFreezer()  #: keeps the garbage collector's full passes out of the recording
        self.stacks = StackRecorder(session, config)
        self.idle = IdleCheck(session, config.interrupt_sleeping)
        self.agent_calls = AgentCalls(session, self.targets)
        self.naming = ThreadNaming(session, self.agent_calls)  #: runtime names of threads, while they live
        self.agent_capture = self.agent_calls.stop_hook(snapshot=False)  #: also ``nprof dump``'s held stops
        self.agent_snapshot = self.agent_calls.stop_hook(snapshot=True)  #: a tick's first stops
        #: how long a tick waits for its threads' stops: half a period, so late ones cannot stall sampling
        self._window = max(MIN_WINDOW, min(config.stop_deadline, 0.5 * self.timer.period))

    # --- targets ---------------------------------------------------------------------------------------

    def add_process(self, pid: int, fresh: bool = False, trace_exec: bool = False) -> SampledProcess:
        """Attach a process and sample it from the next tick (``processes.py``)."""
        return self.processes.add(pid, fresh, trace_exec)

    def add_launched(self, pid: int) -> SampledProcess:
        """Take over a command started by ``launch.py``, waiting in its exec stop; it runs once mapped."""
        return self.processes.add(pid, fresh=True, trace_exec=True, at_exec=True)

    def _notice(self, message: str) -> None:
        message = printable(message)  # it may name a path from the maps
        self.session.meta.notices.append(message)
        self.notice(message)

    # --- the loop ---------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Tick]:
        return self.run()

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> Iterator[Tick]:
        """Yield after every tick until the duration ends, ``should_stop`` is true or every target exited.

        The thread sleeps between ticks at real-time priority where permitted, so that its wake-up preempts
        a target thread on its CPU (``priority.py``); the work after each tick's stops stays there only for a
        short budget, and the thread is back at its own priority when this ends."""
        config = self.config
        # The duration counts from here, not from the set-up: an attach that outlasted -d (a thousand busy
        # threads on two CPUs) left a recording with no tick at all
        due = self.timer.next_due = self.started = time.monotonic()
        self.session.meta.start_time = time.time()  # (with the duration: the span the samples came from)
        end = None if config.duration is None else self.started + config.duration
        self.end_reason = EndReason.STOPPED
        tracer, timer, priority = self.tracer, self.timer, self.priority
        live = tracer.seized.live_pids  # kept up to date in place
        message = priority.start()
        if message:
            self._notice(message)
        self.collector.start(due)
        try:
            while True:
                if end is not None and due >= end:
                    self.end_reason = EndReason.DURATION
                    break
                priority.realtime()
                if not tracer.pump(due, should_stop) or not live:  # pump: also until should_stop
                    if tracer.orphans and self.processes.follow_orphans():
                        continue  # every parent exited, leaving children that were not sampled yet
                    self.end_reason = EndReason.EXITED
                    break
                if tracer.exec_stopped:  # a process waits in its exec stop: map its new program, then resume
                    priority.normal()
                    self.processes.after_execs()
                    continue
                if should_stop():
                    break
                yield self.tick()
                due = timer.advance()
                if end is not None and due > end:
                    due = end
        finally:
            priority.stop()
            self.collector.stop()
            self.flush()
        self.session.meta.duration = time.monotonic() - self.started

    def tick(self) -> Tick:
        """One tick: decide, stop and copy at real-time priority (``priority.py``); then record the copies,
        at real-time priority for a short budget at most, and do the periodic work, which can take long, at
        the thread's own priority."""
        began = time.monotonic()
        self.ticks += 1
        tracer = self.tracer
        live = tracer.seized.live_pids
        synced = time.monotonic() >= self._next_sync
        if synced:
            self._sync_threads()
        due: list[SeizedThread] = []
        reused = 0
        reuse = self.idle.reuse
        for pid, target in self.targets.items():
            if pid not in live:
                continue
            records = target.records
            if records is None:  # a process added since the last look
                records = target.records = tracer.seized.sync(pid)
            dormancy = target.dormancy
            if dormancy is None and len(records) >= MIN_THREADS:
                dormancy = target.dormancy = Dormancy(pid, self.session, self._dormant_after)
            if dormancy is not None:
                reused += dormancy.decide(records, reuse, self._state, due)
                continue
            for record in records:
                if record.gone:
                    continue
                if reuse(record, record.user or self._state(record)):
                    reused += 1
                else:
                    due.append(record)
        native, window = self.config.native, self._window
        # During the stops the agents copy what they can name in advance (``agent_snapshot``); each copy is
        # settled after resume. A thread whose copy fell short is stopped again, and the agent copies what
        # the settle found missing as well (``runtime.RECAPTURE``); one that falls short again is stopped a
        # third time and captured in full. Late stops (after the window) are captured in full: they are
        # settled and recorded at the next tick. Without any agent the stops call no hook at all.
        first, full = (self.agent_snapshot, self.agent_capture) if self.processes.any_agent else (None, None)
        captures = tracer.capture(due, copy_stack=native, agent_capture=first, window=window,
                                  late_agent_capture=full)  # fmt: skip
        self.priority.after_stops()  # every thread stopped runs again
        settle = first is not None
        # stops that came after their tick's window, captured in full, are settled as the tick's are: one
        # the agent finds short (a new thread whose state a walk of the thread lists finds now) is stopped
        # again below. Recorded unsettled, a late capture of a thread with no state yet had no runtime
        # frames: 105 of 200 threads a 3.13 program started at once lacked them in a sample.
        again = self._record_all(tracer.take_late_captures(), settle, answer=False)
        again += self._record_all(captures, settle)
        stopped = len(captures)
        if again:
            stopped += self._capture_again(again, first, full)
        now = time.monotonic()
        if synced:
            self.priority.normal()
            self._housekeeping(now)
        else:
            self.priority.check()
        for pid, target in self.targets.items():
            refreshes = target.caps.refreshes
            if refreshes is not None and pid in live:
                self.agent_calls.between_ticks(refreshes.refresh, "agent_refresh_errors")
        self.tick_seconds += time.monotonic() - began
        return Tick(self.ticks, now - self.started, stopped, reused)

    def _capture_again(
        self, threads: list[SeizedThread], first: AgentCapture | None, full: AgentCapture | None
    ) -> int:
        """Stop again the ``threads`` whose snapshots fell short, each at once after the tick's settles: the
        agent's snapshot hook first (it copies what the settle found missing, or hands the stop to its
        capture), settled after resume; those that fall short again are stopped a third time and captured
        in full (``runtime.RECAPTURE``). Returns how many stops were made."""
        stopped = 0
        native, window = self.config.native, self._window
        for hook, settle in ((first, True), (full, False)):
            self.priority.realtime()
            captures = self.tracer.capture(threads, copy_stack=native, agent_capture=hook, window=window,
                                           late_agent_capture=full)  # fmt: skip
            self.priority.after_stops()
            threads = self._record_all(captures, settle=settle)
            stopped += len(captures)
            if not threads:
                break
        return stopped

    def _sync_threads(self) -> None:
        """At the start of a tick, every SYNC_INTERVAL: seize the threads that appeared since the last look,
        so that this tick stops them, and forget those gone. A process is listed only when its thread count
        says it may have a new thread (``SeizedThreads.may_have_new``), or LIST_AT_LEAST_EVERY after the last
        listing."""
        now = time.monotonic()
        self._next_sync = now + SYNC_INTERVAL
        listing = now >= self._next_listing
        if listing:
            self._next_listing = now + LIST_AT_LEAST_EVERY
        seized = self.tracer.seized
        for pid, target in self.targets.items():
            records = target.records
            if records is None or not seized.process_alive(pid):
                continue
            if not listing and not seized.may_have_new(pid, records):
                continue
            target.records = seized.sync(pid)

    def flush(self) -> None:
        """Add the samples the recording deferred (``dormancy.py``) to the session: ``run`` does at its end;
        a caller of ``tick`` reads the session after this."""
        for target in self.targets.values():
            if target.dormancy is not None:
                target.dormancy.flush()

    def _housekeeping(self, now: float) -> None:
        """After a tick that looked for new threads (``_sync_threads``): new children, execs, and runtimes
        that fresh processes loaded since (``processes.look_again``), a look at each process's code mappings
        (``address_space.py``), and the freeze of what survived the garbage collector (``gc_freeze.py``)."""
        self.collector.tick(now)
        self.processes.look_again()
        for pid, target in self.targets.items():
            if self.tracer.seized.process_alive(pid):
                target.space.recheck(now)
        self.naming.tick(now, self.targets.values())

    def _record_all(self, captures: list[Capture], settle: bool, answer: bool = True) -> list[SeizedThread]:
        """Record a tick's captures (every thread runs again); with ``settle``, first let the agents settle
        their snapshots. Returns the threads whose snapshot fell short, which were not recorded.

        With ``answer``, tracee events are answered between captures: signals that arrived meanwhile wait
        in a stop until then. Not for late captures (``Tracer.take_late_captures``): an event answered may
        be another late stop, copied into a late slot that one of them still occupies."""
        again: list[SeizedThread] = []
        last = len(captures) - 1
        for i, capture in enumerate(captures):
            if settle and not self.agent_calls.settle(capture):
                again.append(capture.thread)
            else:
                self.record(capture)
            if i < last:  # after the last one, the pump for the next tick answers them first
                if answer:
                    self.tracer.answer_events()
                self.priority.check()
        return again

    def _state(self, record: SeizedThread) -> SampledThread:
        state: SampledThread | None = record.user
        if state is None:
            index = self.session.thread_index(record.pid, record.tid, record.start_time, record.name)
            state = record.user = self.threads[record.key] = SampledThread(index, time.monotonic())
        return state

    def prepare_hold(self, threads: Sequence[SeizedThread]) -> None:
        """For ``nprof dump``, before it holds every thread: stop each one briefly (resumed at once, as a
        tick does), let the runtime agent copy it and, with native frames, unwind that copy, so that the hold
        that follows finds its work done. The unwind loads the tables of every module on the threads'
        stacks, and learns each thread's own stack: a thread stopped in a signal handler on an alternate
        signal stack has its own stack copied in the held stop itself (``Tracer._copy``), so that the dump
        goes on to the code the signal interrupted. The agent's copy decodes the code objects on the
        stacks and runs its code once before the hold, where each held copy of a cold process paid for it.

        ``python3 -m benchmarks.bench_dump``, 100 sleeping threads of CPython 3.12: the hold was 39.5 ms
        with only the unwinding moved here, 8.7 ms with the agent's copy too (docs/benchmarks.md)."""
        native = self.config.native
        for capture in self.tracer.capture(threads, copy_stack=native, agent_capture=self.agent_capture):
            # settled (and dropped) as a tick settles its copies: the agent learns there what it could not
            # read in the stop, a thread's id in the target's own pid namespace (CPython 3.11+ in a
            # container: without it, every thread of a dump had no Python frames and no GIL holder)
            self.agent_calls.settle(capture)
            if native:
                self.stacks.learn(self.targets[capture.thread.pid], capture)

    def record(self, capture: Capture) -> None:
        """Unwind, merge, classify and count one capture; the thread is running again by now."""
        record = capture.thread
        self.stacks.record(self.targets[record.pid], self._state(record), capture)

    # --- the end ----------------------------------------------------------------------------------------

    def close(self, detach: bool = True) -> None:
        """Detach from everything, record exit statuses, thread names and counters. ``detach`` False: on a
        tracing thread that exits next, whose exit detaches every thread without stopping it
        (``Tracer.leave_to_thread_exit``)."""
        self.flush()  # (``run`` did, unless its caller left the loop by an exception: the generator is open)
        for target in self.targets.values():
            self.naming.final(target, self.tracer.seized.sync(target.process.pid), self.threads)
        refused = untraced_threads(self.tracer.seized.refused)
        if refused:
            self.session.count("threads_not_traced", len(self.tracer.seized.refused))
            self._notice(refused)
        if not detach:
            if unstopped := self.tracer.leave_to_thread_exit():
                self.session.count("threads_not_stopped", len(unstopped))
                self._notice(unstopped_threads(unstopped))
        elif stuck := self.tracer.detach_all():
            self.session.count("threads_not_detached", len(stuck))
            self._notice(undetached_threads(stuck))
        meta = self.session.meta
        for pid, status in self.tracer.seized.exit_status.items():
            meta.exit_status[pid] = (status >> 8) & 0xFF if status & 0x7F == 0 else -(status & 0x7F)
        stats = self.tracer.stats
        for name in ("late_stops", "late_captures", "signals_forwarded", "group_stops", "threads_seen",
                     "threads_exited", "process_held_ns", "orphans_seized", "first_stop_polls_caught",
                     "first_stop_polls_missed"):  # fmt: skip
            value = getattr(stats, name)
            if value:
                self.session.counters[name] = value
        self.session.counters["ticks"] = self.ticks
        self.session.counters.update(self.priority.counters())
        if stats.held_ns:  # what the recording cost the target: how long nprof kept a thread stopped
            self.session.counters["stop_held_median_ns"] = stats.held_quantile(0.5) or 0
            self.session.counters["stop_held_p90_ns"] = stats.held_quantile(0.9) or 0
            # every stop, second ones included (an agent's snapshot that fell short): the target's whole cost
            self.session.counters["stops"] = stats.held_count
            self.session.counters["stop_held_total_ns"] = stats.held_total_ns
        self.processes.give_up_detection()
        for target in self.targets.values():
            if target.unwinder.frames_scanned:
                self.session.count("frames_scanned", target.unwinder.frames_scanned)
            if target.dormancy is not None and target.dormancy.quiet_ticks:  # (dormancy.py)
                self.session.count("dormant_quiet_ticks", target.dormancy.quiet_ticks)
                self.session.count("dormant_wakes", target.dormancy.wakes)
            for name, value in self.agent_calls.counters(target).items():
                self.session.count(name, value)
            for message in self.agent_calls.notices(target):
                self._notice(message)
        self.objects.save_unwind_tables()  # the next attach to these files starts with their decoded CFI
        for message in unwind_problems(self.modules.objects.values(), self.session):
            self._notice(message)
        self.session.modules = list(self.modules.modules)  # (the notices below name them)
        for shortfall in (stack_window_shortfall(self.session, self.config.window_cap),
                          depth_limit_shortfall(self.session, self.config.max_frames),
                          other_stack_samples(self.session),
                          no_unwind_info(self.session, self.session.modules),
                          unanchored_samples(self.session),
                          unnamed_anchors(self.session)):  # fmt: skip
            if shortfall:
                self._notice(shortfall)
        if self.timer.late_ticks:
            self.session.counters["late_ticks"] = self.timer.late_ticks
            self.session.counters["ticks_missed"] = round(self.timer.missed_ticks)
        shortfall = rate_shortfall(self.ticks, self.timer.missed_ticks, self.config.rate, self.tick_seconds,
                                   (os.getloadavg()[0], os.cpu_count() or 1))  # fmt: skip
        if shortfall:
            self._notice(shortfall)
        costly = signal_cost(stats.signals_forwarded, self.session.meta.duration)
        if costly:
            self._notice(costly)
