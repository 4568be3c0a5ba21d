"""The notice naming modules much of a profile ran in without function names (symbolize/stripped.py)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from profiler.config import ExportConfig
from profiler.model import FrameKind, Module, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.symbolize.stripped import _candidates, _package_of, choose_debug_package, missing_symbol_notices

APP, LIB = 0, 1


def session_with(samples: list[tuple[tuple[tuple[int, int], ...], SampleClass, int]]) -> tuple[Session, dict[int, int]]:
    """A session of native stacks ((module, rel) innermost first), and LIB's frames marked unnamed."""
    session = Session(SessionMeta(pid=1, command=["app"]))
    session.modules = [Module(APP, "/usr/bin/app", None, 0, 0, 0), Module(LIB, "/usr/lib/libx.so.1", "ab12", 0, 0, 0)]
    for frames, cls, n in samples:
        sid = session.intern_stack(tuple((FrameKind.NATIVE, m, rel, 0) for m, rel in frames))
        session.add_sample(0, sid, StopReason.END_OF_STACK, cls, n)
    unnamed = {fid: LIB for fid in range(len(session.frames.kinds())) if session.frames.key(fid)[1] == LIB}
    return session, unnamed


def object_file(symtab: bool) -> SimpleNamespace:
    """What the notice reads of an ObjectFile; a root that is not nprof's keeps dpkg out of it."""
    sections = {".symtab": None} if symtab else {}
    return SimpleNamespace(path="/usr/lib/libx.so.1", root="/nonexistent", in_system_root=False, build_id="ab12",
                           target_root=None, elf=SimpleNamespace(sections=sections))  # fmt: skip


def test_the_share_counts_samples_that_ran_not_idle_ones():
    """30 of 100 running samples have the library's unnamed function on their stack; 500 idle ones too,
    left out, as the top table leaves them out."""
    in_lib = ((LIB, 0x10), (APP, 0x20))
    session, unnamed = session_with([(in_lib, SampleClass.RUNNING, 30), (((APP, 0x30),), SampleClass.RUNNING, 70),
                                     (in_lib, SampleClass.BLOCKED, 500)])  # fmt: skip
    [notice] = missing_symbol_notices(session, unnamed, {LIB: object_file(symtab=False)})
    assert notice == ("30.0% of the samples went through functions without a symbol, shown as MODULE+0xOFFSET, "
                      "in 1 module (libx.so.1 30.0%); /usr/lib/libx.so.1: stripped, and no debug file was found by "
                      "build-id under /usr/lib/debug/.build-id: a debug file put there, or fetched by `debuginfod-find "
                      "debuginfo FILE` from a debuginfod server that has it (DEBUGINFOD_URLS), or a build that "
                      "keeps its symbol table (not stripped, no -s) names them")  # fmt: skip


def wheel_session(modules: int) -> tuple[Session, dict[int, int], dict[int, SimpleNamespace]]:
    """A pandas job's: ``modules`` stripped Cython modules of a wheel, 20 samples in each, 20 in the app."""
    session = Session(SessionMeta(pid=1, command=["python"]))
    site = "/venv/lib/python3.11/site-packages/pandas/_libs"
    session.modules = [Module(APP, "/usr/bin/python3.11", None, 0, 0, 0)] + [
        Module(m, f"{site}/mod{m}.cpython-311-x86_64-linux-gnu.so", f"b{m}", 0, 0, 0) for m in range(1, modules + 1)
    ]
    for m in range(1, modules + 1):
        sid = session.intern_stack(((FrameKind.NATIVE, m, 0x10, 0), (FrameKind.NATIVE, APP, 0x20, 0)))
        session.add_sample(0, sid, StopReason.END_OF_STACK, SampleClass.RUNNING, 20 + m)
    sid = session.intern_stack(((FrameKind.NATIVE, APP, 0x30, 0),))
    session.add_sample(0, sid, StopReason.END_OF_STACK, SampleClass.RUNNING, 20)
    unnamed = {fid: session.frames.key(fid)[1] for fid in range(len(session.frames)) if session.frames.key(fid)[1]}
    objects = {m: SimpleNamespace(**{**vars(object_file(symtab=False)), "path": session.modules[m].path})
               for m in range(1, modules + 1)}  # fmt: skip
    return session, unnamed, objects


def test_the_stripped_modules_of_pip_wheels_are_one_line_saying_nothing_can_be_installed():
    """A pandas job printed nine paragraphs of ~450 characters, one per stripped Cython module of its wheels,
    each advising a build that keeps its symbol table, which a pip user cannot act on (issue 44)."""
    session, unnamed, objects = wheel_session(9)
    [notice] = missing_symbol_notices(session, unnamed, objects)
    assert notice == (
        "91.8% of the samples went through functions without a symbol, shown as MODULE+0xOFFSET, in 9 modules "
        "(mod9.cpython-311-x86_64-linux-gnu.so 11.8%, mod8.cpython-311-x86_64-linux-gnu.so 11.4%, "
        "mod7.cpython-311-x86_64-linux-gnu.so 11.0% and 6 more); mod9.cpython-311-x86_64-linux-gnu.so, "
        "mod8.cpython-311-x86_64-linux-gnu.so, mod7.cpython-311-x86_64-linux-gnu.so and 6 more: from pip wheels, "
        "for which no symbols are published: nothing to install"
    )


def test_each_kind_of_file_gets_its_own_advice_in_the_one_line(monkeypatch):
    """A distribution's library (its debug package, or its debuginfod server), wheels' modules (nothing), a
    file built here (a debug file, or a build keeping its symbols): each kind once, its modules together. A
    sample with two such modules on its stack counts once in the share."""
    from profiler.symbolize import stripped

    session, unnamed, objects = wheel_session(2)
    libz = Module(3, "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13", "1f95", 0, 0, 0)
    mine = Module(4, "/opt/app/libmine.so", "77aa", 0, 0, 0)
    session.modules += [libz, mine]
    both = session.intern_stack(((FrameKind.NATIVE, 3, 0x10, 0), (FrameKind.NATIVE, 4, 0x10, 0)))
    session.add_sample(0, both, StopReason.END_OF_STACK, SampleClass.RUNNING, 50)
    unnamed = {fid: session.frames.key(fid)[1] for fid in range(len(session.frames)) if session.frames.key(fid)[1]}
    for module in (libz, mine):
        objects[module.id] = SimpleNamespace(**{**vars(object_file(symtab=False)), "path": module.path})
    monkeypatch.setattr(stripped, "_debug_packages",
                        lambda objs: {libz.path: "`apt install zlib1g-dbg` installs their names"})  # fmt: skip
    [notice] = missing_symbol_notices(session, unnamed, objects)
    assert notice.startswith("82.3% of the samples went through functions without a symbol, shown as "
                             "MODULE+0xOFFSET, in 4 modules (libz.so.1.2.13 44.2%, libmine.so 44.2%, "
                             "mod2.cpython-311-x86_64-linux-gnu.so 19.5% and 1 more); ")  # fmt: skip
    clauses = notice.split("); ", 1)[1].split("; ")
    assert clauses[0] == ("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13: `apt install zlib1g-dbg` installs their "
                          "names, or `debuginfod-find "
                          "debuginfo FILE` fetches them from the distribution's debuginfod server (DEBUGINFOD_URLS)")
    assert clauses[1].startswith("/opt/app/libmine.so: stripped, and no debug file was found by build-id")
    assert clauses[2] == ("mod2.cpython-311-x86_64-linux-gnu.so, mod1.cpython-311-x86_64-linux-gnu.so: from pip "
                          "wheels, for which no symbols are published: nothing to install")
    assert len(clauses) == 3 and "\n" not in notice


def test_a_wheel_file_is_one_under_site_or_dist_packages():
    from profiler.symbolize.stripped import is_wheel_file

    assert is_wheel_file("/venv/lib/python3.11/site-packages/numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.so")
    assert is_wheel_file("/usr/local/lib/python3.11/dist-packages/pandas/_libs/algos.cpython-311.so")
    assert not is_wheel_file("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13")
    assert not is_wheel_file("/opt/site-packages-tool/lib.so")


@pytest.mark.parametrize("n, total", [(9, 100), (10, 1001)])
def test_too_few_samples_say_nothing(n, total):
    """Fewer than 10 samples, or under 1% of them: noise, or no line of the top table at stake."""
    session, unnamed = session_with([(((LIB, 0x10),), SampleClass.RUNNING, n),
                                     (((APP, 0x30),), SampleClass.RUNNING, total - n)])  # fmt: skip
    assert missing_symbol_notices(session, unnamed, {LIB: object_file(symtab=False)}) == []


def test_a_module_with_a_symbol_table_is_not_called_stripped():
    """Code no symbol covers in a file that has a symbol table (assembly without symbols)."""
    session, unnamed = session_with([(((LIB, 0x10),), SampleClass.RUNNING, 50)])
    [notice] = missing_symbol_notices(session, unnamed, {LIB: object_file(symtab=True)})
    assert notice.endswith("; libx.so.1: not stripped, but no symbol covers these functions (code without "
                           "symbols, such as assembly)")  # fmt: skip


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a dpkg system")
def test_the_package_of_a_file_is_found_by_its_path_before_the_usr_merge():
    """dpkg's database lists libc as /lib/x86_64-linux-gnu/libc.so.6; the maps give /usr/lib/..."""
    assert _package_of("/usr/lib/x86_64-linux-gnu/libc.so.6") == "libc6"
    assert _package_of("/nonexistent/libnothing.so") is None


def test_with_gil_the_share_counts_only_the_samples_shown():
    """--gil shows the GIL holder's samples only: a stripped library run without the GIL (hashlib's
    libcrypto) is in none of them, and is not named."""
    in_lib = ((LIB, 0x10), (APP, 0x20))
    session, unnamed = session_with([(in_lib, SampleClass.RUNNING, 50), (((APP, 0x30),), SampleClass.GIL_HELD, 50)])
    objects = {LIB: object_file(symtab=False)}
    assert missing_symbol_notices(session, unnamed, objects, ExportConfig(gil_only=True)) == []
    [notice] = missing_symbol_notices(session, unnamed, objects)
    assert notice.startswith("50.0% of the samples")


def test_the_debug_package_is_named_after_the_source_first_and_never_one_installed_without_the_file():
    """Debian's symbols of libpython3.11's library are in python3.11-dbg (named after the source package);
    libpython3.11-dbg, which apt knows too, is the library's debug build: advised before, it installed no
    names (a sweep). A -dbg package installed at the library's version left no debug file where nprof
    looked, so it is passed over; one at another version is advised (installing it updates it)."""
    known = {"python3.11-dbg", "libpython3.11-dbg", "libc6-dbg"}
    python = ["python3.11-dbg", "libpython3.11-dbg", "libpython3.11-dbgsym"]
    assert _candidates("libpython3.11", "python3.11") == python
    assert _candidates("libc6", "") == ["libc6-dbg", "libc6-dbgsym"]
    version = {"libpython3.11": ("3.11.2-6", "python3.11")}
    assert choose_debug_package("libpython3.11", python, known, version) == "python3.11-dbg"
    installed = {**version, "python3.11-dbg": ("3.11.2-6", "python3.11")}
    assert choose_debug_package("libpython3.11", python, known, installed) == "libpython3.11-dbg"
    older = {**version, "python3.11-dbg": ("3.11.2-5", "python3.11")}
    assert choose_debug_package("libpython3.11", python, known, older) == "python3.11-dbg"
    assert choose_debug_package("zlib1g", ["zlib-dbg", "zlib1g-dbg", "zlib1g-dbgsym"], known, {}) is None
