"""Thread names in the session, as the program set them: the runtime's own name for the thread where it has
one (CPython: ``threading.Thread.name``), else the kernel's (``comm``). Which process a thread is in is said
by the process's label or header, not by each thread's name: a thread's comm is its creator's unless it set
its own, so it is added to the runtime's name only where the thread set it to something else (``label``).

A runtime forgets a thread as it exits (CPython drops it from ``threading._active``), so the runtime's name is
asked for while the thread lives: every ``NAMING_INTERVAL``, for the threads sampled since, a few times each.
The end of a recording names the threads still alive again, as they are then (a thread may rename itself).
Nothing here runs while a thread is stopped.
"""

from __future__ import annotations

from collections.abc import Iterable

from profiler.profile.session import Session
from profiler.sampling.agent_calls import AgentCalls
from profiler.sampling.sampled_process import SampledProcess, SampledThread
from profiler.target.capture import SeizedThread
from profiler.target.procfs import read_comm

#: how often threads sampled since are given their runtime's name: a thread that exits before the recording
#: ends can be named no more
NAMING_INTERVAL = 0.25
#: looks for a thread's runtime name before it is left with the kernel's: threads the runtime does not
#: name (CPython: ones started through _thread, not threading) are not asked about at every pass
NAME_LOOKS = 4


class ThreadNaming:
    """Renames the session's threads as their runtime names them (the sampler calls ``tick`` between ticks
    and ``final`` before it detaches)."""

    def __init__(self, session: Session, agent_calls: AgentCalls) -> None:
        self.session = session
        self.agent_calls = agent_calls
        self._next = 0.0  #: monotonic time of the next pass

    def tick(self, now: float, targets: Iterable[SampledProcess]) -> None:
        """At most every ``NAMING_INTERVAL``: name the threads sampled since, while they live."""
        if now < self._next:
            return
        self._next = now + NAMING_INTERVAL
        for target in targets:
            if target.agent is None or target.records is None:
                continue
            for record in target.records:
                state = record.user
                if (state is None or state.runtime_named or state.last_stack is None or record.gone
                        or state.name_looks >= NAME_LOOKS):  # fmt: skip
                    continue
                runtime_name = self.agent_calls.thread_name(target, record.tid, state.fs_base, state.seen)
                if runtime_name:
                    state.runtime_named = True
                    self.session.rename_thread(state.index, label(record, runtime_name, target.process.comm))
                else:
                    state.name_looks += 1

    def final(
        self, target: SampledProcess, records: Iterable[SeizedThread], states: dict[tuple[int, int], SampledThread]
    ) -> None:
        """The names of ``target``'s live threads as they are now; one the runtime named before and not now
        (an exiting thread, already out of ``threading._active``) keeps that name."""
        for record in records:
            state = states.get(record.key)
            if state is None:
                continue
            runtime_name = self.agent_calls.thread_name(target, record.tid, state.fs_base, state.seen)
            if runtime_name or not state.runtime_named:
                self.session.rename_thread(state.index, label(record, runtime_name, target.process.comm))


def label(record: SeizedThread, runtime_name: str | None, process_comm: str) -> str:
    """The name of ``record``'s thread (``thread_name``), its kernel name read now."""
    return thread_name(runtime_name, read_comm(record.pid, record.tid) or record.name, process_comm)


def thread_name(runtime_name: str | None, comm: str, process_comm: str) -> str:
    """A thread's name: the runtime's name for it where it has one, else the kernel's (``comm``). The
    kernel's is added, ``name (comm)``, only where the thread set one of its own (``prctl(PR_SET_NAME)``,
    ``pthread_setname_np``): not where it is its process's name (``process_comm``), which a thread inherits
    from its creator, nor where it is the start of the runtime's name (CPython 3.14 sets a thread's comm to
    its name, cut to the kernel's 15 bytes)."""
    if not runtime_name or runtime_name == comm:
        return comm
    if comm == process_comm or runtime_name.startswith(comm):
        return runtime_name
    return f"{runtime_name} ({comm})"
