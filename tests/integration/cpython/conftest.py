"""Real CPython targets under real ptrace: start a script on one interpreter, attach, capture, decode.

Uses ``Tracer`` directly (not the sampler): each helper call is one capture tick in which every thread is
stopped, copied by the agent and resumed, exactly as the sampler does it.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from agents.cpython import CPythonAgent, CPythonSession
from agents.cpython.capture import StackCapture
from profiler.model import RuntimeFrame
from profiler.target.capture import Capture
from profiler.target.process import TargetProcess
from profiler.target.tracer import Tracer
from tests.support.targets import running_target
from tests.targets.python.interpreters import TARGETS, Interpreter


@dataclass
class Attached:
    proc: subprocess.Popen
    process: TargetProcess
    session: CPythonSession
    tracer: Tracer

    def tick(self) -> list[tuple[Capture, StackCapture | None]]:
        """One capture of every thread: (tracer capture, agent capture) pairs."""
        session = self.session
        due = self.tracer.seized.sync(self.proc.pid)
        captures = self.tracer.capture(
            due, copy_stack=False, agent_capture=lambda record, regs: session.capture(record.tid, regs)
        )
        return [(c, c.agent_data) for c in captures]  # type: ignore[misc]

    def names(self, frames: list[RuntimeFrame]) -> list[str]:
        """Names of the Python frames, innermost first (shims left out)."""
        return [self.session.describe(f).name for f in frames if not f.shim]


def python_running(path: str, *argv: str, after: tuple[str, ...] = ()) -> contextlib.AbstractContextManager:
    """Run ``path argv... READY_FD after...`` and yield once it wrote "ready"; kill and reap it afterwards."""
    return running_target([path, *argv, *after], ready_at=1 + len(argv))


@contextlib.contextmanager
def attached(interp: Interpreter, script: str, *args: str) -> Iterator[Attached]:
    """Run ``tests/targets/python/<script> READY_FD args`` on ``interp``, attach once it is ready."""
    with python_running(interp.path, os.path.join(TARGETS, script), after=args) as proc:
        tracer = Tracer()
        try:
            process = TargetProcess(proc.pid)
            agent = CPythonAgent()
            session = agent.detect(process)
            assert session is not None, f"{interp.label}: {agent.last_reason}"
            tracer.add_process(process)
            yield Attached(proc, process, session, tracer)
        finally:
            tracer.detach_all()


def marked_lines(script: str) -> dict[str, int]:
    """``{name: line}`` of the ``# at:name`` markers of a target script."""
    lines = {}
    with open(os.path.join(TARGETS, script), encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            match = re.search(r"# at:([\w-]+)", text)
            if match:
                lines[match.group(1)] = number
    return lines
