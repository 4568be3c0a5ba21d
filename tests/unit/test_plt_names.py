"""PLT stubs named as objdump names them (``name@plt``), on real files: every pyenv libpython, libc (whose
stubs lead to IFUNCs through R_X86_64_IRELATIVE: objdump prints ``*ABS*+0xADDR@plt``, nprof the IFUNC's
name), libstdc++, and a small program built here with gcc in the two layouts GNU ld writes: ``.plt`` (and
``.plt.got``, where crtstuff's ``__cxa_finalize``, called and also compared by address, goes), and
``.plt.sec`` for Intel CET's IBT (``-z ibtplt``). Files that are not installed are skipped."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from agents.cpython.anchors import InterpreterFunctions, is_call_glue
from profiler.binary.elf import ElfFile
from profiler.binary.objfile import ObjectFile
from profiler.binary.plt import load_plt_stubs
from profiler.binary.symbols import ELF64_SYM, STT_FUNC, STT_GNU_IFUNC
from profiler.model import FrameKind, Module, NativeFrame, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.symbolize.symbolizer import _symbol_names, symbolize
from tests.support.targets import build_c
from tests.targets.python.interpreters import PYENV_ROOT

PYENV = PYENV_ROOT
LIBRARIES = sorted(glob.glob(f"{PYENV}/versions/3.*/lib/libpython3.*.so.1.0")) + [
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
]
PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    char buf[64];
    strcpy(buf, argv[0]);
    printf("%zu\n", strlen(buf));
    puts(buf);
    return abs(argc - 1);
}
"""
#: the PLT layouts: gcc flags, and the section the calls go through
LAYOUTS = {
    "lazy": (["-Wl,-z,lazy"], ".plt"),
    "ibt": (["-fcf-protection=full", "-Wl,-z,ibtplt", "-Wl,-z,lazy"], ".plt.sec"),
}

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils is not installed")


def objdump_plt(path: str) -> dict[int, str]:
    """Address -> name of every ``<name@plt>`` objdump prints in the file's PLT sections."""
    sections = [arg for name in (".plt", ".plt.sec", ".plt.got") for arg in ("-j", name)]
    out = subprocess.run(["objdump", "-d", *sections, path], capture_output=True, text=True).stdout
    return {int(addr, 16): name for addr, name in re.findall(r"^([0-9a-f]+) <(.+)@plt>:", out, re.M)}


def ifuncs_at(path: str, value: int) -> set[str]:
    """The names of the file's dynamic function symbols at ``value`` (an IFUNC and its aliases)."""
    elf = ElfFile(path)
    dynsym, dynstr = elf.section_data(".dynsym"), bytes(elf.section_data(".dynstr") or b"")
    syms = np.frombuffer(dynsym, dtype=ELF64_SYM, count=len(dynsym) // ELF64_SYM.itemsize)
    kind = syms["st_info"] & 0xF
    rows = syms[((kind == STT_FUNC) | (kind == STT_GNU_IFUNC)) & (syms["st_value"] == value)]
    return {dynstr[o : dynstr.index(b"\0", o)].decode() for o in rows["st_name"].tolist()}


def check_against_objdump(path: str) -> int:
    """Every stub objdump names is named alike (an IRELATIVE one: by an IFUNC at its address); returns the
    number of stubs compared."""
    stubs = load_plt_stubs(ElfFile(path))
    ours = dict(zip(stubs.starts.tolist(), stubs.names))
    reference = objdump_plt(path)
    problems = []
    for addr, name in reference.items():
        if (absolute := re.fullmatch(r"\*ABS\*\+0x([0-9a-f]+)", name)) is not None:
            known = ifuncs_at(path, int(absolute.group(1), 16))  # none: a local IFUNC, not in .dynsym
            if ours.get(addr) not in (known or {None}):
                problems.append(f"0x{addr:x}: {ours.get(addr)} is no IFUNC at {name}")
        elif ours.get(addr) != name:
            problems.append(f"0x{addr:x}: {ours.get(addr)} against objdump's {name}")
    assert not problems, "\n".join(problems[:10])
    # objdump leaves out the lazy-binding half of an IBT .plt; nprof names it by the .rela.plt index it pushes
    extra = {ours[addr] for addr in set(ours) - set(reference)}
    assert extra <= set(reference.values()), f"stubs objdump has no name like: {sorted(extra)[:5]}"
    return len(reference)


@pytest.mark.parametrize("path", LIBRARIES, ids=os.path.basename)
def test_library_stubs_are_named_as_objdump_names_them(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    assert check_against_objdump(path) > 0


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, str]:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    root = tmp_path_factory.mktemp("plt")
    source = root / "plt.c"
    source.write_text(PROGRAM)
    built = {}
    for layout, (flags, _section) in LAYOUTS.items():
        built[layout] = build_c(str(source), str(root), ["-O1", "-fno-builtin", *flags], name=layout)
    return built


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_plt_layout_gnu_ld_writes_is_named(programs, layout):
    path = programs[layout]
    section = LAYOUTS[layout][1]
    assert ElfFile(path).sections.get(section) is not None, f"gcc wrote no {section}"
    check_against_objdump(path)
    names = set(load_plt_stubs(ElfFile(path)).names)
    assert {"strcpy", "printf", "strlen", "puts", "abs", "__cxa_finalize"} <= names, names


def test_the_symbolizer_names_a_pc_in_a_stub(programs):
    """A pc no symbol covers, inside a stub: ``name@plt``; outside every stub: ``module+0xoffset``, the
    offset of where its code starts (the FDE GNU ld writes for ``.plt`` starts at the resolver's entry)."""
    path = programs["lazy"]
    stubs = load_plt_stubs(ElfFile(path))
    strlen = int(stubs.starts[stubs.names.index("strlen")])
    plt0 = ElfFile(path).sections[".plt"].sh_addr  # the resolver's entry: no symbol leads there
    module = Module(id=0, path=path, build_id=None, start=0, end=0, bias=0)
    names, _named = _symbol_names(module, ObjectFile(ElfFile(path)), [strlen + 6, plt0 + 2])
    assert names == ["strlen@plt", f"{os.path.basename(path)}+0x{plt0:x}"]


def test_a_return_address_made_up_to_enter_a_function_is_named_after_it():
    """glibc's makecontext pushes ``__start_context``'s address as the new context's return address: looked
    up one byte back, as a caller's return address is, it fell in the padding before the function and
    showed as ``libc.so.6+0x519bf``. An address no symbol covers, right before a function's start, is
    named after that function."""
    path = "/lib/x86_64-linux-gnu/libc.so.6"
    obj = ObjectFile(ElfFile(path))
    start = obj.symbols.address_of("__start_context") if obj.symbols is not None else None
    if start is None:
        pytest.skip("libc's __start_context is not in its symbols (libc6-dbg not installed)")
    module = Module(0, path, obj.build_id, 0, 0, 0)
    assert obj.symbols.lookup(start[0] - 1) is None, "libc is laid out with padding before it"
    assert _symbol_names(module, obj, [start[0] - 1, start[0] + 1])[0] == ["__start_context"] * 2


class InterpreterGlue:
    """The two checks the CPython agent gives the symbolizer for ``--hide-interpreter``, over a libpython file
    without a live interpreter: by address (its call-glue functions) and by name (inlined copies, stubs)."""

    def __init__(self, obj: ObjectFile) -> None:
        self.functions = InterpreterFunctions(obj.symbols, 0)

    def is_interpreter_frame(self, frame: NativeFrame) -> bool:
        return self.functions.is_interpreter_frame(frame)

    def is_interpreter_function(self, name: str) -> bool:
        return is_call_glue(name)


@pytest.mark.parametrize("path", [p for p in LIBRARIES if "libpython" in p], ids=os.path.basename)
def test_a_stub_that_leads_to_call_glue_is_interpreter_glue(path):
    """A shared libpython calls its own exported call functions (``PyObject_Vectorcall``) through its PLT. A
    pc in such a stub is call glue, hidden by ``--hide-interpreter`` as the function is: a CI run found
    ``PyObject_Vectorcall@plt`` left in 3.13's profile of ``sorted(key=...)``. A stub to another function
    stays shown."""
    obj = ObjectFile(ElfFile(path))
    stubs = load_plt_stubs(obj.elf)
    glue = [i for i, name in enumerate(stubs.names) if is_call_glue(name)]
    other = [i for i, name in enumerate(stubs.names) if not is_call_glue(name)]
    if not glue:
        pytest.skip(f"{os.path.basename(path)} calls no call glue through its PLT")
    session = Session(SessionMeta(pid=7, command=["python3"], duration=1.0))
    session.modules = [Module(id=0, path=path, build_id=None, start=0, end=0, bias=0)]
    pcs = [int(stubs.starts[glue[0]]) + 4, int(stubs.starts[other[0]]) + 4]
    sid = session.intern_stack(tuple((FrameKind.NATIVE, 0, pc, 0) for pc in pcs))
    session.add_sample(session.thread_index(7, 7, 1, "main"), sid, StopReason.END_OF_STACK, SampleClass.RUNNING, 1)
    keys = [session.frames.key(fid) for fid in range(len(session.frames))]
    infos = symbolize(keys, session.modules, session.agents, {0: obj}, {"cpython": InterpreterGlue(obj)}).frames
    shown = {info.name: info.interpreter for info in infos}
    assert shown == {f"{stubs.names[glue[0]]}@plt": True, f"{stubs.names[other[0]]}@plt": False}
