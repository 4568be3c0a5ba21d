"""Detection: which processes get a session, and the one-line reason when one does not."""

from __future__ import annotations

import dataclasses
import glob
import os

import pytest

from agents.cpython import CPythonAgent
from agents.cpython.session import MAIN_UNMAPPED_NOTICE
from agents.cpython.threads import ThreadMap
from profiler.model import NativeFrame, UnwindMethod
from profiler.runtime import AgentSession, Capabilities
from profiler.target.process import TargetProcess
from tests.integration.cpython.conftest import attached, python_running
from tests.support.targets import running_target
from tests.targets.python.interpreters import PYENV_ROOT, interpreter_params

READY = "import os, sys, time; os.write(int(sys.argv[1]), b'ready\\n'); time.sleep(60)"
#: maps argv[1] read-only and shared, as nprof maps the ELF files it reads, then says ready on fd argv[2]
MAPS_A_FILE = (
    "import mmap, os, sys, time\n"
    "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
    "os.write(int(sys.argv[2]), b'ready\\n'); time.sleep(60)\n"
)


@pytest.mark.parametrize("interp", interpreter_params())
def test_supported_interpreters_are_detected(interp):
    with python_running(interp.path, "-c", READY) as proc:
        agent = CPythonAgent()
        session = agent.detect(TargetProcess(proc.pid))
        assert session is not None, agent.last_reason
        assert session.interpreter.version == interp.version
        assert session.layout.source == ("_Py_DebugOffsets" if interp.version >= (3, 13) else "table")
        assert session.bindings.threads.complete and len(session.bindings.threads.states) == 1
        functions = session.functions
        assert len(functions.eval) >= 1 and len(functions.glue) > 10
        assert len(functions.gil_wait) >= 1, f"take_gil not found in {functions.source}"
        start = functions.eval.starts[0]
        assert session.is_anchor(NativeFrame(0, 0, start + 16, UnwindMethod.IP))
        assert session.is_anchor(NativeFrame(0, 0, start + 17, UnwindMethod.CFI))  # a return address inside
        assert session.is_interpreter_frame(NativeFrame(0, 0, start + 16, UnwindMethod.IP))
        assert not session.is_anchor(NativeFrame(0, 0, start, UnwindMethod.CFI))  # returns to the byte before
        assert not session.is_anchor(NativeFrame(0, 0, 0x1000, UnwindMethod.IP))
        assert session.is_gil_wait(NativeFrame(0, 0, functions.gil_wait.starts[0] + 4, UnwindMethod.IP))
        # the engine finds each capability once, by the protocols of runtime.py: the CPython agent has all
        assert isinstance(session, AgentSession)
        caps = Capabilities.of(session)
        missing = [f.name for f in dataclasses.fields(caps) if getattr(caps, f.name) is None]
        assert not missing, f"the CPython agent lacks {missing}"


@pytest.mark.parametrize("interp", interpreter_params())
def test_a_libpython_mapped_to_be_read_is_not_the_interpreter(interp):
    """A Python process that maps another version's libpython only to read it (nprof itself, profiling a
    target on another interpreter) is still read as the interpreter it runs."""
    others = sorted(
        path
        for path in glob.glob(os.path.join(PYENV_ROOT, "versions", "*", "lib", "libpython3.*.so.1.0"))
        if f"libpython{interp.version[0]}.{interp.version[1]}." not in path
    )
    if not others:
        pytest.skip(f"no libpython of another version than {interp.label} under {PYENV_ROOT}/versions")
    with python_running(interp.path, "-c", MAPS_A_FILE, others[0]) as proc:
        agent = CPythonAgent()
        session = agent.detect(TargetProcess(proc.pid))
        assert session is not None, agent.last_reason
        assert session.interpreter.version == interp.version
        assert session.bindings.threads.complete and len(session.bindings.threads.states) == 1


@pytest.mark.parametrize(
    ("minor", "reason"),
    [("2.7", "no _PyRuntime"), ("3.6", "CPython 3.6 is not supported"), ("3.7", "CPython 3.7 is not supported")],
)
def test_old_pythons_are_refused_with_a_reason(minor, reason):
    major = minor.split(".")[0]
    candidates = sorted(p for p in os.listdir(os.path.join(PYENV_ROOT, "versions")) if p.startswith(minor + "."))
    if not candidates:
        pytest.skip(f"no CPython {minor} under {PYENV_ROOT}/versions")
    path = os.path.join(PYENV_ROOT, "versions", candidates[-1], "bin", f"python{major}")
    with python_running(path, "-c", READY) as proc:
        agent = CPythonAgent()
        assert agent.detect(TargetProcess(proc.pid)) is None
        assert reason in agent.last_reason


def test_native_process_is_not_python(chain_fp):
    with running_target([chain_fp]) as target:
        agent = CPythonAgent()
        assert agent.detect(TargetProcess(target.pid)) is None
        assert "not a CPython" in agent.last_reason


@pytest.mark.parametrize("interp", [p for p in interpreter_params() if p.id in ("3.10", "3.12")])
def test_a_main_thread_that_never_matches_a_thread_state_is_reported(interp):
    """Captures whose thread has no Python thread state are normal for native threads; for the main thread,
    all along, they mean every Python frame was lost (as a wrong interpreter mapping once did): the end of
    the recording says so."""
    with attached(interp, "chain.py") as t:
        for _ in range(MAIN_UNMAPPED_NOTICE + 5):
            for _capture, stack in t.tick():
                t.session.frames(stack)  # decoded after resume, as the sampler does
        assert t.session.notices() == []  # mapped: nothing to say
        # what a wrong layout or mapping left: no thread state for any thread, the walk found none (refresh,
        # between ticks, would map them again; these ticks call none)
        t.session.bindings.slots.clear()
        t.session.bindings.threads = ThreadMap({}, [], [], True)
        t.session._main_mapped = False
        for _ in range(MAIN_UNMAPPED_NOTICE - 1):
            t.tick()
        assert t.session.notices() == []  # a few unmapped captures: a fresh interpreter starting up
        t.tick()
        [notice] = t.session.notices()
        assert "main thread matched none" in notice and interp.label.split("-")[-1] in notice
