"""The sampler's calls into runtime agents (DESIGN.md section 4), each guarded: an agent bug is counted in
the session and costs at most a sample's runtime frames or a thread's name. It never leaves a thread
stopped, and never ends a recording. (Decoding a capture's frames is guarded in ``stacks.py``.)

Which agent a call goes to is looked up by the thread's pid in the sampler's targets, at each call: a
process that exec'd gets a new SampledProcess (and agent) under the same pid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from profiler.profile.session import Session
from profiler.runtime import RECAPTURE, StopCopy
from profiler.sampling.sampled_process import SampledProcess
from profiler.target import ptrace as pt
from profiler.target.capture import AgentCapture, Capture, SeizedThread

T = TypeVar("T")


class AgentCalls:
    """Guarded calls into the agents of ``targets`` (the sampler's dict, pid -> SampledProcess, shared)."""

    def __init__(self, session: Session, targets: dict[int, SampledProcess]) -> None:
        self.session = session
        self.targets = targets

    def stop_hook(self, snapshot: bool) -> AgentCapture:
        """The tracer's hook while a thread is stopped: the agent of its process copies what it needs, with
        its ``snapshot`` (the least copy, walked after resume by ``settle``) where it has one and ``snapshot``
        is asked for, else its full ``capture``. Made once per kind, so a stop pays one Python call here."""
        targets, session = self.targets, self.session

        def hook(record: SeizedThread, regs: pt.user_regs_struct) -> StopCopy | None:
            target = targets.get(record.pid)
            if target is None or target.agent is None:
                return None
            try:
                snapshots = target.caps.snapshots
                if snapshot and snapshots is not None:
                    data = snapshots.snapshot(record.tid, regs)
                    if data is not None:
                        return data
                return target.agent.capture(record.tid, regs)
            except Exception:  # an agent bug must not leave the thread stopped or end the recording
                session.count("agent_capture_errors")
                return None

        return hook

    def settle(self, capture: Capture) -> bool:
        """After resume: the agent's capture from its snapshot. False: the snapshot fell short, and the
        thread must be captured again (the first capture is dropped whole, native stack included)."""
        snapshots = self.targets[capture.thread.pid].caps.snapshots
        if snapshots is None or capture.agent_data is None:
            return True
        try:
            data = snapshots.settle(capture.agent_data)
        except Exception:
            self.session.count("agent_settle_errors")
            data = None  # recorded with native frames only
        if data is RECAPTURE:
            return False
        capture.agent_data = data
        return True

    def between_ticks(self, fn: Callable[[], object], counter: str) -> None:
        """Run an agent's between-ticks hook; a bug in it is counted under ``counter``."""
        try:
            fn()
        except Exception:
            self.session.count(counter)

    def thread_name(self, target: SampledProcess, tid: int, fs_base: int, alive_since: float) -> str | None:
        """The runtime's own name for a thread (CPython: ``threading.Thread.name``), None if it has none;
        ``alive_since``: a monotonic time the thread was alive at (``runtime.ThreadNames``)."""
        names = target.caps.names
        if names is None:
            return None
        return self._guarded(lambda: names.thread_name(tid, fs_base, alive_since), "agent_name_errors", None)

    def counters(self, target: SampledProcess) -> dict[str, int]:
        """What the agent counted over the recording (none if it reports nothing: ``runtime.Reports``)."""
        reports = target.caps.reports
        empty: dict[str, int] = {}
        return empty if reports is None else dict(self._guarded(reports.counters, "agent_counter_errors", empty))

    def notices(self, target: SampledProcess) -> list[str]:
        """The agent's end-of-recording notices for the user (none if it reports nothing)."""
        reports = target.caps.reports
        none: list[str] = []
        return none if reports is None else list(self._guarded(reports.notices, "agent_notice_errors", none))

    def _guarded(self, call: Callable[[], T], counter: str, default: T) -> T:
        """``call()``, or ``default`` if it raised (counted under ``counter``)."""
        try:
            return call()
        except Exception:
            self.session.count(counter)
            return default
