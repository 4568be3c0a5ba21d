"""Ground truth for the DWARF resolver from real tools, and the documented ways nprof may differ from them.

The reference is binutils' ``addr2line -f -i -C`` (2.40 on Debian 12). ``llvm-symbolizer`` (LLVM 14) is
the second opinion, used only where binutils 2.40 is known to be wrong or to take a name from elsewhere:

1. **Paths are normalised** by nprof (``comp_dir/./Include/x.h`` -> ``comp_dir/Include/x.h``); both tools'
   paths are normalised before comparing.
2. **DWARF 5 file index 1**: binutils 2.40 resolves it to file entry 0. gcc usually makes entries 0 and 1
   the same file, but glibc's units are built so that entry 1 is another file (``round_away`` in
   ``include/rounding-mode.h`` is reported in ``strtof_l.c``); gdb, llvm-symbolizer and nprof follow the
   spec (DWARF 5, section 6.2.4, item 20). Where the files differ, llvm-symbolizer's file must match.
3. **Names of functions without a DW_AT_linkage_name** (C++ template instances with internal linkage,
   e.g. instantiated with a lambda type): binutils names the innermost function after the ELF symbol
   covering the address when that symbol starts at the function's first address; llvm-symbolizer and
   nprof keep DWARF's name for inlined frames. Where the names differ, llvm-symbolizer's must match,
   compared in a canonical spelling: LLVM's demangler writes ``'lambda'(int)`` and ``(.constprop.0)``
   where libiberty writes ``{lambda(int)#1}`` and ``[clone .constprop.0]``, nprof keeps gcc's
   ``.constprop.0`` suffix as is (``demangle()``), and llvm-symbolizer shows glibc symbol versions
   (``@GLIBC_2.2.5``).
4. **gcc's ``-gdwarf64``**: binutils 2.40 reads the DWARF 32 line table of a DWARF 64 unit with the
   unit's offset size ("DWARF error: offset ... greater than or equal to .debug_line_str size") and
   prints ``??``; llvm-symbolizer is the reference for that build.
5. **Addresses no DWARF subprogram or line covers** (code without debug info, e.g. libgcc's soft-float
   in libc, or the parts of Rust's std built without line tables) give ``[]``: the symbol-table name is
   the caller's job. Both tools print a symbol name there, without a line (and binutils a file name
   taken from an STT_FILE symbol).
6. **C++ scopes of names without a linkage name**: both tools print such a function's DW_AT_name alone
   (``sort<...>``, ``operator()``); nprof prefixes the scopes its declaration sits in, as gdb does
   (``std::sort<...>``, ``f()::{lambda#1}::operator()``), so a tool's name must match nprof's unqualified
   end: the part after the last ``::`` that is outside template arguments and parentheses.

7. **A relative DW_AT_comp_dir** (glibc's units: ``./misc``, built with ``-ffile-prefix-map``): both tools
   join it with directory entry 0, which is that same directory, for the files in it
   (``misc/misc/mntent_r.c``); gdb and nprof take directory 0 as the unit's directory once
   (``misc/mntent_r.c``). A relative path of theirs that starts with one run of components twice matches
   with the run once.

Lines and the number of frames must always equal addr2line's.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
from collections.abc import Sequence

import pytest

from profiler.model import FrameInfo
from tests.support.targets import build_c

Level = tuple[str, str | None, int | None]  # (name, file, line), outermost first

_DISCRIMINATOR = re.compile(r" \(discriminator \d+\)$")
_VERSION = re.compile(r"@@?[A-Za-z_][\w.]*$")
_CLONE = re.compile(r"(?: \[clone |\s?\()?\.(constprop|part|isra|cold|lto_priv)(\.\d+)?[\])]?")
_LAMBDA = re.compile(r"\{lambda\(([^)]*)\)#\d+\}|'lambda\d*'\(([^)]*)\)")


def canonical(name: str) -> str:
    """One spelling for the same function name across libiberty, LLVM's demangler and nprof (rule 3)."""
    name = _VERSION.sub("", name)
    name = _CLONE.sub(lambda m: f".{m.group(1)}{m.group(2) or ''}", name)
    return _LAMBDA.sub(lambda m: f"lambda({m.group(1) if m.group(1) is not None else m.group(2)})", name)


def _path(file: str | None) -> str | None:
    return posixpath.normpath(file) if file else None


def addr2line(path: str, addresses: Sequence[int]) -> dict[int, list[Level]]:
    """``addr2line -a -f -i -C``, outermost first (addr2line prints the innermost first)."""
    out = subprocess.run(
        ["addr2line", "-a", "-f", "-i", "-C", "-e", path, *(hex(a) for a in addresses)],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    found: dict[int, list[Level]] = {}
    current: list[Level] = []
    i = 0
    while i < len(out):
        if re.fullmatch(r"0x[0-9a-f]+", out[i]):
            current = found.setdefault(int(out[i], 16), [])
            i += 1
            continue
        name, where = out[i], _DISCRIMINATOR.sub("", out[i + 1])
        file, _, line = where.rpartition(":")
        number = int(line) if line.isdigit() and line != "0" else None
        current.insert(0, (name, None if file == "??" else _path(file), number))
        i += 2
    return found


def llvm_symbolizer(path: str, addresses: Sequence[int]) -> dict[int, list[Level]]:
    """``llvm-symbolizer --inlining -f -C``, outermost first; {} if it is not installed."""
    if shutil.which("llvm-symbolizer") is None:
        return {}
    out = subprocess.run(
        ["llvm-symbolizer", f"--obj={path}", "--inlining", "--print-address", "-f", "-C",
         *(hex(a) for a in addresses)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found: dict[int, list[Level]] = {}
    for block in out.strip("\n").split("\n\n"):
        lines = block.splitlines()
        levels = []
        for name, where in zip(lines[1::2], lines[2::2]):
            file, line, _column = where.rsplit(":", 2)
            levels.insert(0, (name, None if file == "??" else _path(file), int(line) if line != "0" else None))
        found[int(lines[0], 16)] = levels
    return found


def unqualified(name: str, *references: str | None) -> str:
    """``name`` without the scopes nprof added (rule 6), where a reference name lacks them."""
    depth, cut = 0, -1
    for i, ch in enumerate(name):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            cut = i + 2
    tail = name[cut:] if cut >= 0 else name
    return tail if any(r is not None and "::" not in r.split("<", 1)[0] and r.startswith(tail.split("<", 1)[0])
                       for r in references) else name


def frames_as_levels(frames: Sequence[FrameInfo]) -> list[Level]:
    return [(f.name, f.file, f.line) for f in frames]


def disagreement(mine: Sequence[FrameInfo], reference: list[Level], second: list[Level] | None) -> str | None:
    """Why ``mine`` does not match the tools, or None if it does (within rules 1-5)."""
    levels = frames_as_levels(mine)
    if not levels and len(reference) == 1 and reference[0][2] is None:
        return None  # rule 5
    if len(levels) != len(reference):
        return f"{len(levels)} frames, addr2line has {len(reference)}: {levels} vs {reference}"
    for depth, ((name, file, line), (ref_name, ref_file, ref_line)) in enumerate(zip(levels, reference)):
        other = second[depth] if second and len(second) == len(reference) else None
        if line != ref_line:
            return f"level {depth}: line {line}, addr2line has {ref_line}"
        if file != ref_file and (other is None or file != other[1]) and file != undoubled(ref_file):
            return f"level {depth}: file {file}, addr2line has {ref_file}, llvm-symbolizer {other}"
        name = unqualified(name, ref_name, other[0] if other else None)
        if canonical(name) != canonical(ref_name) and (other is None or canonical(name) != canonical(other[0])):
            return f"level {depth}: name {name!r}, addr2line has {ref_name!r}, llvm-symbolizer {other}"
    return None


def undoubled(path: str | None) -> str | None:
    """``misc/misc/x.c`` -> ``misc/x.c``: a relative path whose first components come twice, once (rule 7)."""
    if path is None or path.startswith("/"):
        return path
    parts = path.split("/")
    for k in range(1, len(parts) // 2 + 1):
        if parts[:k] == parts[k : 2 * k]:
            return "/".join(parts[k:])
    return path


# --- the oracle's own rules ---------------------------------------------------------------------------


def test_canonical_spellings_agree():
    libiberty = (
        "void std::sort<int*, f()::{lambda(int, int)#1}>(int*, int*, f()::{lambda(int, int)#1}) [clone .constprop.0]"
    )
    llvm = "void std::sort<int*, f()::'lambda'(int, int)>(int*, int*, f()::'lambda'(int, int)) (.constprop.0)"
    nprof = "void std::sort<int*, f()::{lambda(int, int)#1}>(int*, int*, f()::{lambda(int, int)#1}).constprop.0"
    assert canonical(libiberty) == canonical(llvm) == canonical(nprof)
    assert canonical("xdr_uint32_t@GLIBC_2.2.5") == canonical("xdr_uint32_t@@GLIBC_2.2.5") == "xdr_uint32_t"
    assert canonical("main") == "main"


def test_a_doubled_relative_directory_is_taken_once():
    assert undoubled("misc/misc/mntent_r.c") == "misc/mntent_r.c"
    assert undoubled("a/b/a/b/x.c") == "a/b/x.c"
    assert undoubled("include/stdio.h") == "include/stdio.h" and undoubled("/a/a/x.c") == "/a/a/x.c"
    assert disagreement([FrameInfo("f", "misc/x.c", 3)], [("f", "misc/misc/x.c", 3)], None) is None


def test_disagreement_rules():
    ref = [("main", "/a/x.c", 3), ("inner", "/a/x.h", 7)]
    inlined = FrameInfo("inner", "/a/x.h", 7, inlined=True)
    assert disagreement([FrameInfo("main", "/a/x.c", 3), inlined], ref, None) is None
    assert disagreement([FrameInfo("main", "/a/x.c", 4)], ref[:1], None) is not None
    assert disagreement([], [("memcpy", None, None)], None) is None
    second = [("main", "/a/y.c", 3)]
    assert disagreement([FrameInfo("main", "/a/y.c", 3)], ref[:1], second) is None
    assert disagreement([FrameInfo("main", "/a/z.c", 3)], ref[:1], second) is not None


@pytest.mark.skipif(shutil.which("addr2line") is None, reason="binutils is not installed")
def test_addr2line_parsing_outermost_first(tmp_path):
    source = tmp_path / "t.c"
    source.write_text(
        "static inline __attribute__((always_inline)) int g(int x) { return x * 7 + 1; }\n"
        "int f(int x) { return g(x); }\nint main(void) { return 0; }\n"
    )
    binary = build_c(str(source), str(tmp_path), ["-O2", "-g"], name="t")
    symbols = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    f_address = next(int(line.split()[0], 16) for line in symbols.splitlines() if line.endswith(" f"))
    levels = addr2line(str(binary), [f_address])[f_address]
    assert levels[0][0] == "f" and levels[-1][0] == "g"
