"""Issue 44, readable frames, on real CPython targets: a function is one tower whichever of its lines were
sampled (``--lines``: one per line), names carry no build paths, and ``--hide-interpreter`` starts every
Python stack at its first Python frame, on every interpreter the tests cover; ``nprof report`` renders a
saved session either way."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict

import pytest

from tests.support.targets import record, run_nprof, running_target
from tests.targets.python.interpreters import TARGETS, debug_interpreter_params, interpreter_params

INTERPRETERS = interpreter_params()
#: where the interpreters the tests use were built: pyenv's python-build, Debian's package build
BUILD_PATHS = ("/tmp/python-build.", "/build/reproducible-path/")
#: a frame label that carries a line: "name (file:line)"
WITH_LINE = re.compile(r" \(.*:\d+\)$")


def folded_stacks(text: str) -> list[tuple[list[str], int]]:
    out = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        out.append((stack.split(";"), int(count)))
    return out


def labels_by_function(stacks: list[tuple[list[str], int]]) -> dict[str, set[str]]:
    """Function name -> the labels it has in the folded stacks (``name (where)`` or ``name [module]``)."""
    out: dict[str, set[str]] = defaultdict(set)
    for frames, _count in stacks:
        for label in frames:
            out[re.sub(r" [(\[].*$", "", label)].add(label)
    return out


def c_heavy(interp, tmp_path, *extra: str) -> str:
    """Record ``c_heavy.py`` (json, re, zlib, sorted: C code under Python frames) to a folded file."""
    out = str(tmp_path / "c_heavy.folded")
    with running_target([interp.path, os.path.join(TARGETS, "c_heavy.py"), "60"], ready_at=2) as target:
        record(target.pid, out, *extra)
    return out


@pytest.mark.parametrize("interp", [p for p in INTERPRETERS if p.id in ("3.12", "debian-3.11")])
def test_a_function_is_one_tower_and_one_per_line_with_lines(interp, tmp_path):
    """The folded output of a Python program running C code names each function once, without the line it
    was at: ``main`` calls json, re, zlib and sorted from four lines, and was four towers (and
    ``PyUnicode_New`` six, at six lines of unicodeobject.c). ``--lines`` gives them back, also when a saved
    session is rendered; ``nprof report`` renders the session as ``record`` did."""
    out = c_heavy(interp, tmp_path)
    stacks = folded_stacks(open(out, encoding="utf-8").read())
    with_line = {label for frames, _ in stacks for label in frames if WITH_LINE.search(label)}
    assert not with_line, f"labels with a line: {sorted(with_line)[:5]}"
    by_function = labels_by_function(stacks)
    # a function with several source files: split by the files of the lines sampled (not a PLT stub or
    # _start in two modules, "name [module]"; not <module> of several scripts)
    split = {name: labels for name, labels in by_function.items()
             if len({label for label in labels if label.endswith(")")}) > 1 and name != "<module>"}  # fmt: skip
    assert not split, f"functions with several labels: {dict(list(split.items())[:5])}"
    script = os.path.join(TARGETS, "c_heavy.py")
    assert by_function["main"] == {f"main ({script})"}
    assert by_function["_PyEval_EvalFrameDefault"] == {"_PyEval_EvalFrameDefault (Python/ceval.c)"}

    session = out.removesuffix(".folded") + ".nprof"
    again, lines = str(tmp_path / "again.folded"), str(tmp_path / "lines.folded")
    for args in ((session, "-o", again), (session, "-o", lines, "--lines")):
        result = run_nprof("report", *args)
        assert result.returncode == 0, result.stderr
    assert open(again, encoding="utf-8").read() == open(out, encoding="utf-8").read()
    per_line = labels_by_function(folded_stacks(open(lines, encoding="utf-8").read()))
    assert len(per_line["main"]) >= 3, per_line["main"]  # the calls' lines, as sampled
    assert all(WITH_LINE.search(label) for label in per_line["main"])
    native_split = [name for name, labels in per_line.items()
                    if len(labels) > 1 and all(f"({script}" not in label for label in labels)
                    and any(".c:" in label or ".h:" in label for label in labels)]  # fmt: skip
    assert native_split, "no native function sampled at two lines: --lines shows nothing per line"


@pytest.mark.parametrize("interp", [p for p in INTERPRETERS if p.id in ("3.12", "debian-3.11")])
def test_names_carry_no_build_paths_but_speedscope_files_are_whole(interp, tmp_path):
    """Folded stacks and ``nprof dump`` name frames with short paths (dump with the line each is at);
    speedscope's frames have the whole path, one frame per function."""
    out = str(tmp_path / "c_heavy.speedscope.json")
    with running_target([interp.path, os.path.join(TARGETS, "c_heavy.py"), "60"], ready_at=2) as target:
        record(target.pid, out, "-d", "1")
        dump = run_nprof("dump", "--pid", str(target.pid))
    assert dump.returncode == 0, dump.stderr
    assert not [p for p in BUILD_PATHS if p in dump.stdout], "a build path in dump"
    assert re.search(r"_PyEval_EvalFrameDefault \(Python/[\w.]+:\d+\)", dump.stdout), dump.stdout[:2000]
    folded = run_nprof("report", out.replace(".speedscope.json", ".nprof"), "-f", "folded")
    assert folded.returncode == 0, folded.stderr
    assert not [p for p in BUILD_PATHS if p in folded.stdout], "a build path in a name"
    assert "Python/ceval.c)" in folded.stdout
    assert re.search(r"JSON(De|En)coder\.\w+ \(json/(de|en)coder\.py\)", folded.stdout), "stdlib path not short"
    with open(out, encoding="utf-8") as f:
        frames = json.load(f)["shared"]["frames"]
    loop = [f for f in frames if f["name"] == "_PyEval_EvalFrameDefault"]
    assert len(loop) == 1 and loop[0]["file"].endswith("Python/ceval.c") and loop[0].get("line"), loop
    if interp.label == "3.12":  # (Debian's LTO build declares its functions in units of relative paths)
        assert loop[0]["file"].startswith("/tmp/python-build."), loop
    coders = [f for f in frames if re.match(r"JSON(De|En)coder\.", f["name"])]
    assert coders and all(f["file"].startswith("/") and f["file"].endswith("coder.py") for f in coders)
    assert len({f["name"] for f in coders}) == len(coders), "one frame per function"


@pytest.mark.parametrize("interp", INTERPRETERS + debug_interpreter_params())
def test_hide_interpreter_starts_python_stacks_at_their_first_python_frame(interp, tmp_path):
    """``--hide-interpreter`` leaves out the interpreter's start-up outward of the first Python frame: the
    main thread's stacks start at ``<module>`` (not ``_start``, ``__libc_start_main``, ``Py_BytesMain``...
    ``_PyEval_EvalFrameDefault``), a thread's at ``Thread._bootstrap`` (not ``clone3``, ``start_thread``,
    ``pythread_wrapper``...). Without it they are kept."""
    out, kept = str(tmp_path / "hidden.speedscope.json"), str(tmp_path / "kept.speedscope.json")
    with running_target([interp.path, os.path.join(TARGETS, "threads.py")], ready_at=2) as target:
        record(target.pid, out, "--hide-interpreter", "--idle", "-d", "1")
    result = run_nprof("report", out.replace(".speedscope.json", ".nprof"), "-o", kept, "--idle")
    assert result.returncode == 0, result.stderr
    roots = python_roots(out)
    assert roots.get("MainThread") == {"<module>"}, roots
    threads = [name for name in roots if name != "MainThread"]
    assert len(threads) >= 8, roots  # threads.py's cpu-, sleep- and lock- threads
    assert all(roots[name] == {"Thread._bootstrap" if interp.version >= (3, 11) else "_bootstrap"}
               for name in threads), roots  # fmt: skip
    assert not {r for names in python_roots(kept).values() for r in names} & {"<module>", "Thread._bootstrap",
                                                                              "_bootstrap"}  # fmt: skip


def python_roots(path: str) -> dict[str, set[str]]:
    """Per thread (its Python name), the root frames of its stacks that hold a Python frame."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    frames = doc["shared"]["frames"]
    python = [str(f.get("file", "")).endswith(".py") for f in frames]
    out: dict[str, set[str]] = defaultdict(set)
    for profile in doc["profiles"]:
        if profile["name"].startswith("all threads"):
            continue  # (the threads together: each thread's own profile follows)
        name = profile["name"].split(" (")[0]
        for sample in profile["samples"]:
            if any(python[i] for i in sample):
                out[name].add(frames[sample[0]]["name"])
    return dict(out)
