"""Issue 44, readable frames, in the pure parts: a frame is its function by default (``--lines``: per line),
paths are shortened in names and whole in speedscope's file field, and start-up code is flagged by the
runtime's modules and the C library's start functions. The real-target counterparts are in
tests/integration/test_readable_frames.py."""

from __future__ import annotations

import json

import pytest

from profiler.config import ExportConfig
from profiler.export.folded import FoldedExporter
from profiler.export.speedscope import SpeedscopeExporter
from profiler.model import FrameInfo, FrameKind, Mechanism, Module, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.symbolize.startup import mark_startup_frames
from profiler.tree.source_paths import short_path
from profiler.tree.totals import function_totals

PYENV_BUILD = "/tmp/python-build.20260509073544.228/Python-3.12.1"
DEBIAN_BUILD = "/build/reproducible-path/python3.11-3.11.2"


@pytest.mark.parametrize(
    "path, root, short",
    [
        # native code, relative to the root of the tree it was built in (as the symbolizer gives it)
        (f"{PYENV_BUILD}/Python/ceval.c", PYENV_BUILD, "Python/ceval.c"),
        (f"{DEBIAN_BUILD}/Objects/dictobject.c", DEBIAN_BUILD, "Objects/dictobject.c"),
        ("/usr/include/x86_64-linux-gnu/bits/string_fortified.h", DEBIAN_BUILD,
         "/usr/include/x86_64-linux-gnu/bits/string_fortified.h"),  # outside the tree: whole
        (f"{PYENV_BUILD}x/Python/ceval.c", PYENV_BUILD, f"{PYENV_BUILD}x/Python/ceval.c"),  # not under it
        ("csu/libc-start.c", None, "csu/libc-start.c"),  # Debian's glibc: relative already
        # Python code, relative to where the import system found it
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/json/decoder.py", None, "json/decoder.py"),
        ("/usr/lib/python3.11/json/decoder.py", None, "json/decoder.py"),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/numpy/_core/_methods.py", None,
         "numpy/_core/_methods.py"),
        ("/usr/lib/python3/dist-packages/apt/package.py", None, "apt/package.py"),
        ("/home/u/app/.venv/lib/python3.12/site-packages/flask/app.py", None, "flask/app.py"),
        ("/usr/lib64/python3.13t/threading.py", None, "threading.py"),
        # the program's own files, and names that are not paths
        ("/work/app/lib/main.py", None, "/work/app/lib/main.py"),
        ("<frozen importlib._bootstrap>", None, "<frozen importlib._bootstrap>"),
    ],
)
def test_paths_are_shortened_to_their_trees(path, root, short):
    assert short_path(path, root) == short


def _one_function_at_three_lines() -> Session:
    """``<module>`` -> ``JSONDecoder.decode`` (lines 337, 353) -> the eval loop's C code, sampled at three
    addresses whose lines are in two files of the build (3.12: ceval.c and generated_cases.c.h)."""
    session = Session(SessionMeta(pid=7, command=["python3"], duration=1.0))
    thread = session.thread_index(7, 7, 1, "main")
    decoder = "/root/.pyenv/versions/3.12.1/lib/python3.12/json/decoder.py"
    infos = {
        (FrameKind.RUNTIME, 0x10, 0): FrameInfo("<module>", "/work/app.py", 3, function_file="/work/app.py",
                                                function_line=1),
        (FrameKind.RUNTIME, 0x20, 4): FrameInfo("JSONDecoder.decode", decoder, 337, function_file=decoder,
                                                function_line=332),
        (FrameKind.RUNTIME, 0x20, 8): FrameInfo("JSONDecoder.decode", decoder, 353, function_file=decoder,
                                                function_line=332),
    }  # fmt: skip
    for address, (file, line) in zip((1, 2, 3), (("Python/ceval.c", 705), ("Python/generated_cases.c.h", 256),
                                                 ("Python/generated_cases.c.h", 900))):  # fmt: skip
        infos[(FrameKind.NATIVE, address, 0)] = FrameInfo(
            "_PyEval_EvalFrameDefault", f"{PYENV_BUILD}/{file}", line, "libpython3.12.so.1.0",
            function_file=f"{PYENV_BUILD}/Python/ceval.c", function_line=654, source_root=PYENV_BUILD)
    for n, (code, offset, native) in enumerate([(0x20, 4, 1), (0x20, 8, 2), (0x20, 8, 3), (0x20, 4, 3)]):
        stack = ((FrameKind.NATIVE, 0, native, 0), (FrameKind.RUNTIME, 0, code, offset),
                 (FrameKind.RUNTIME, 0, 0x10, 0))  # innermost first  # fmt: skip
        session.add_sample(thread, session.intern_stack(stack), StopReason.END_OF_STACK, SampleClass.RUNNING, n + 1)
    session.frame_info = []
    for fid in range(len(session.frames)):
        kind, _agent_or_module, address, offset = session.frames.key(fid)
        session.frame_info.append(infos[(FrameKind(kind), address, offset)])
    return session


def test_a_function_is_one_frame_and_with_lines_one_per_line():
    session = _one_function_at_three_lines()
    folded = FoldedExporter().render(session, ExportConfig()).decode()
    assert folded == ("<module> (/work/app.py);JSONDecoder.decode (json/decoder.py);"
                      "_PyEval_EvalFrameDefault (Python/ceval.c) 10\n")  # fmt: skip
    by_line = FoldedExporter().render(session, ExportConfig(lines=True)).decode().splitlines()
    head = "<module> (/work/app.py:3);JSONDecoder.decode (json/decoder.py:"
    assert by_line == [f"{head}337);_PyEval_EvalFrameDefault (Python/ceval.c:705) 1",
                       f"{head}337);_PyEval_EvalFrameDefault (Python/generated_cases.c.h:900) 4",
                       f"{head}353);_PyEval_EvalFrameDefault (Python/generated_cases.c.h:256) 2",
                       f"{head}353);_PyEval_EvalFrameDefault (Python/generated_cases.c.h:900) 3"]  # fmt: skip

    doc = json.loads(SpeedscopeExporter().render(session, ExportConfig()))
    frames = doc["shared"]["frames"]
    assert sorted(f["name"] for f in frames) == ["<module>", "JSONDecoder.decode", "_PyEval_EvalFrameDefault"]
    loop = next(f for f in frames if f["name"] == "_PyEval_EvalFrameDefault")
    assert loop == {"name": "_PyEval_EvalFrameDefault", "file": f"{PYENV_BUILD}/Python/ceval.c", "line": 654}
    decode = next(f for f in frames if f["name"] == "JSONDecoder.decode")
    assert decode["file"].startswith("/root/.pyenv/") and decode["line"] == 332, "whole path, its first line"
    lines_doc = json.loads(SpeedscopeExporter().render(session, ExportConfig(lines=True)))
    assert len(lines_doc["shared"]["frames"]) == 1 + 2 + 3


def test_the_table_of_top_functions_is_per_function_with_short_paths_either_way():
    session = _one_function_at_three_lines()
    for config in (ExportConfig(), ExportConfig(lines=True)):
        totals, samples = function_totals(session, config)
        assert samples == 10
        assert [(t.label, t.self_samples, t.total_samples) for t in totals] == [
            ("_PyEval_EvalFrameDefault (libpython3.12.so.1.0)", 10, 10),
            ("<module> (/work/app.py)", 0, 10),
            ("JSONDecoder.decode (json/decoder.py)", 0, 10),
        ]


class _Interpreter:
    """An agent session as ``mark_startup_frames`` asks it (``InterpreterCode``)."""

    name = "cpython"

    def is_interpreter_module(self, path: str) -> bool:
        return path.endswith("/libpython3.12.so.1.0") or path.endswith("/bin/python3.12")


def test_start_up_code_is_the_runtime_modules_the_c_library_and_the_entry_point():
    paths = ["/root/.pyenv/versions/3.12.1/bin/python3.12", "/usr/lib/x86_64-linux-gnu/libc.so.6",
             "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0", "/opt/host/bin/embedder",
             "/lib/x86_64-linux-gnu/libc-2.31.so", "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"]
    modules = [Module(i, path, None, 0, 0x1000, 0) for i, path in enumerate(paths)]
    named = [("_start", 0), ("__libc_start_main_impl", 1), ("__libc_start_call_main", 1), ("Py_BytesMain", 2),
             ("_PyEval_EvalFrameDefault", 2), ("clone3", 1), ("start_thread", 1), ("main", 3),
             ("libc-2.31.so+0x29f40", 4), ("_start", 3), ("inflate", 5)]  # fmt: skip
    keys = [(FrameKind.NATIVE, module, 0x100 + i, 0) for i, (_name, module) in enumerate(named)]
    keys.append((FrameKind.RUNTIME, 0, 0x20, 0))
    infos = [FrameInfo(name, module="m") for name, _module in named] + [FrameInfo("<module>", "/work/app.py")]
    mark_startup_frames(keys, modules, infos, {"cpython": _Interpreter()})  # type: ignore[dict-item]
    # an embedder's main is not the runtime's, nor is zlib; a stripped libc's frames are libc's all the same
    assert [f.name for f in infos if not f.startup] == ["main", "inflate", "<module>"]
    without_agent = [FrameInfo(name, module="m") for name, _module in named] + [FrameInfo("<module>")]
    mark_startup_frames(keys, modules, without_agent, {})
    assert [f.name for f in without_agent if not f.startup] == ["Py_BytesMain", "_PyEval_EvalFrameDefault",
                                                                "main", "inflate", "<module>"]  # fmt: skip


def test_start_up_code_is_hidden_only_outward_of_a_first_runtime_frame():
    """``_start`` -> ``Py_BytesMain`` -> eval loop -> ``<module>``: hidden down to ``<module>``; the same
    frames on a stack of the interpreter's shutdown (no Python frame) show whole."""
    session = Session(SessionMeta(pid=7, command=["python3"], duration=1.0))
    thread = session.thread_index(7, 7, 1, "main")
    native = [(FrameKind.NATIVE, 0, a, 0) for a in (1, 2, 3, 4)]
    module = (FrameKind.RUNTIME, 0, 0x10, 0)
    ran = session.intern_stack((native[3], module, native[2], native[1], native[0]))  # innermost first
    shutdown = session.intern_stack((native[3], native[1], native[0]))
    for sid in (ran, shutdown):
        session.add_sample(thread, sid, StopReason.END_OF_STACK, SampleClass.RUNNING, 1)
    names = {1: ("_start", True), 2: ("Py_BytesMain", True), 3: ("_PyEval_EvalFrameDefault", True),
             4: ("PyDict_New", True)}  # fmt: skip
    session.frame_info = []
    for fid in range(len(session.frames)):
        kind, _m, address, _o = session.frames.key(fid)
        if kind == FrameKind.RUNTIME:
            session.frame_info.append(FrameInfo("<module>", "/work/app.py"))
        else:
            name, startup = names[address]
            session.frame_info.append(FrameInfo(name, module="python3", startup=startup))
    shown = FoldedExporter().render(session, ExportConfig(hide_interpreter=True)).decode().splitlines()
    assert shown == ["<module> (/work/app.py);PyDict_New [python3] 1",
                     "_start [python3];Py_BytesMain [python3];PyDict_New [python3] 1"]  # fmt: skip
    kept = FoldedExporter().render(session, ExportConfig()).decode().splitlines()
    assert kept[1].startswith("_start [python3];Py_BytesMain [python3];_PyEval_EvalFrameDefault [python3];<module>")


def test_a_function_frame_keeps_every_field_but_the_sample_s_file_and_line():
    """``shown_frame`` builds the frame field by field (for speed): a field added to ``FrameInfo`` and not
    copied there would be lost from every output by function."""
    import dataclasses

    values = {"name": "f", "file": "a.c", "line": 3, "module": "m.so", "inlined": True, "interpreter": True,
              "function_file": "b.c", "function_line": 2, "source_root": "/r", "startup": True,
              "mechanism": Mechanism.GC}  # fmt: skip
    assert set(values) == {f.name for f in dataclasses.fields(FrameInfo)}, "a field this test does not set"
    info = FrameInfo(**values)  # type: ignore[arg-type]
    from profiler.tree.frame_identity import shown_frame

    assert shown_frame(info, lines=False) == dataclasses.replace(info, file="b.c", line=2)
    assert shown_frame(info, lines=True) is info
