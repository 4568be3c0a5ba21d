"""A target blocked at a known point: exact frames, names, files, lines and locals, on every interpreter."""

from __future__ import annotations

import os

import pytest

from tests.integration.cpython.conftest import attached, marked_lines
from tests.targets.python.interpreters import TARGETS, debug_interpreter_params, interpreter_params

SCRIPT = "blocked.py"


@pytest.mark.parametrize("interp", interpreter_params() + debug_interpreter_params())
def test_blocked_stack_is_exact(interp):
    lines = marked_lines(SCRIPT)
    path = os.path.join(TARGETS, SCRIPT)
    with attached(interp, SCRIPT) as t:
        [(_capture, stack)] = t.tick()
        frames = t.session.frames(stack)
        assert t.session.holds_gil(stack) is False, "a thread blocked in os.read has released the GIL"
    python = [f for f in frames if not f.shim]
    infos = [t.session.describe(f) for f in python]
    expected = [("inner", "inner"), ("middle", "middle"), ("outer", "outer"), ("main", "main"), ("<module>", "module")]
    assert [(i.name, i.line) for i in infos] == [(name, lines[mark]) for name, mark in expected]
    assert all(i.file == path for i in infos)
    # the merge contract: every frame is the start of its eval-loop activation before 3.11; from 3.11 the
    # whole chain runs in one activation started by <module> (Python-to-Python calls are inlined)
    entries = [f.entry for f in python]
    if interp.version < (3, 11):
        assert all(entries)
    else:
        assert entries == [False, False, False, False, True]
    shims = [f for f in frames if f.shim]
    assert len(shims) == (1 if interp.version >= (3, 12) else 0)


@pytest.mark.parametrize("interp", interpreter_params() + debug_interpreter_params())
def test_blocked_frame_locals(interp):
    with attached(interp, SCRIPT) as t:
        [(_capture, stack)] = t.tick()
        frames = t.session.frames(stack)
        local_lists = t.session.locals(stack)  # dump reads them while the thread is stopped; it is blocked here
    assert len(local_lists) == len([f for f in frames if not f.shim])  # one per Python frame shown
    inner = dict(local_lists[0])
    assert inner["text"] == repr("caf\xe9 \u20ac \U0001f40d")
    assert inner["number"] == "-1234567890123456789012345"
    assert inner["small"] == "42"
    assert inner["ratio"] == "2.5"
    assert inner["flag"] == "True"
    assert inner["nothing"] == "None"
    assert inner["items"] == "[1, 'two', 3.0, None]"
    assert inner["pair"] == "(42, 'x')"
    assert inner["table"] == "{'a': 1, 'b': [2, 3]}"
    assert inner["blob"] == repr(b"\x00bytes")
    assert inner["thing"].startswith("<Opaque object at 0x")
    assert inner["depth"] == "3"
    assert dict(local_lists[1]) == {"ready_fd": inner["ready_fd"]}


@pytest.mark.parametrize("interp", interpreter_params() + debug_interpreter_params())
def test_python_called_from_c_has_each_frames_locals(interp):
    """A C call between Python frames (a shim frame on 3.12+) does not shift the locals onto the frame
    below, and 3.13's frame under a specialized ``__init__`` call (``_Py_InitCleanup``, which never gets
    past its prologue) is not shown, as CPython's tracebacks do not show it."""
    script = "called_from_c.py"
    lines = marked_lines(script)
    with attached(interp, script) as t:
        [(_capture, stack)] = t.tick()
        frames = t.session.frames(stack)
        local_lists = t.session.locals(stack)
    python = [f for f in frames if not f.shim]
    infos = [t.session.describe(f) for f in python]
    expected = [("Box.__init__" if interp.version >= (3, 11) else "__init__", "init"), ("middle", "middle"),
                ("outer", "outer"), ("main", "main"), ("<module>", "module")]  # fmt: skip
    assert [(i.name, i.line) for i in infos] == [(name, lines[mark]) for name, mark in expected]
    own = ["init_local", "middle_local", "outer_local"]
    for name, frame_locals in zip(own, local_lists):
        assert name in dict(frame_locals), (name, local_lists)
