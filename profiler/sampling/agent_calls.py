"""The sampler's calls into runtime agents (DESIGN.md section 4), each guarded: an agent bug is counted in
the session and costs at most a sample's runtime frames or a thread's name. It never leaves a thread
stopped, and never ends a recording. (Decoding a capture's frames is guarded in ``stacks.py``.)

Which agent a call goes to is looked up by the thread's pid in the sampler's targets, at each call: a
process that exec'd gets a new Target (and agent) under the same pid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from profiler.runtime import RECAPTURE
from profiler.profile.session import Session
from profiler.sampling.target import Target
from profiler.target import ptrace as pt
from profiler.target.capture import AgentCapture, Capture, ThreadRecord


class AgentCalls:
    """Guarded calls into the agents of ``targets`` (the sampler's dict, pid -> Target, shared)."""

    def __init__(self, session: Session, targets: dict[int, Target]) -> None:
        self.session = session
        self.targets = targets

    def stop_hook(self, snapshot: bool) -> AgentCapture:
        """The tracer's hook while a thread is stopped: the agent of its process copies what it needs, with
        its ``snapshot`` (the least copy, walked after resume by ``settle``) where it has one and ``snapshot``
        is asked for, else its full ``capture``. Made once per kind, so a stop pays one Python call here."""
        targets, session = self.targets, self.session

        def hook(record: ThreadRecord, regs: pt.user_regs_struct) -> object:
            target = targets.get(record.pid)
            if target is None or target.agent is None:
                return None
            try:
                if snapshot and target.snapshot is not None:
                    data = target.snapshot(record.tid, regs)
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
        settle = self.targets[capture.thread.pid].settle
        if settle is None or capture.agent_data is None:
            return True
        try:
            data = settle(capture.agent_data)
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

    def thread_name(self, target: Target, tid: int, fs_base: int, alive_since: float) -> str | None:
        """The runtime's own name for a thread (CPython: ``threading.Thread.name``), None if it has none;
        ``alive_since``: a monotonic time the thread was alive at (``runtime.py``)."""
        return self._optional(target, "thread_name", "agent_name_errors", None, tid, fs_base, alive_since)

    def counters(self, target: Target) -> dict[str, int]:
        """What the agent counted over the recording (none if it has no ``counters``)."""
        return dict(self._optional(target, "counters", "agent_counter_errors", {}))

    def notices(self, target: Target) -> list[str]:
        """The agent's end-of-recording notices for the user (none if it has no ``notices``)."""
        return list(self._optional(target, "notices", "agent_notice_errors", []))

    def _optional(self, target: Target, method: str, counter: str, default: Any, *args: object) -> Any:
        """Call one of the agent session's optional methods (runtime.py); ``default`` if it has none, or if
        it raised (counted under ``counter``)."""
        fn = getattr(target.agent, method, None)
        if fn is None:
            return default
        try:
            return fn(*args)
        except Exception:
            self.session.count(counter)
            return default
