"""Thread names in the session: the kernel's (``comm``), with the runtime's own name for the thread where it
has one (CPython: ``threading.Thread.name``), shown as ``runtime name (comm)``.

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
                    self.session.rename_thread(state.index, label(record, runtime_name))
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
                self.session.rename_thread(state.index, label(record, runtime_name))


def label(record: SeizedThread, runtime_name: str | None) -> str:
    """The kernel's name for the thread (comm), with the runtime's name for it where it has one."""
    comm = read_comm(record.pid, record.tid) or record.name
    return f"{runtime_name} ({comm})" if runtime_name and runtime_name != comm else comm
