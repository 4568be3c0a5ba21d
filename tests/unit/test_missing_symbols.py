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
    assert notice == ("30.0% of the samples went through functions of libx.so.1 that have no symbol, shown as "
                      "libx.so.1+0xOFFSET: /usr/lib/libx.so.1 is stripped and no debug file for build-id ab12 "
                      "was found under /usr/lib/debug; a build that keeps its symbol table (not stripped, no -s), "
                      "or its debug file, names them")  # fmt: skip


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
    assert notice.endswith(": no symbol of /usr/lib/libx.so.1 covers them")


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
