"""DwarfResolver on programs built here with gcc/g++ -O2 -g: every instruction of the functions under test,
outermost-first chains compared with addr2line (test_symbolize_oracle.py lists the tolerated differences).

The C program nests ``static inline`` / ``always_inline`` functions three deep so that most call
instructions in ``main`` sit under two or three inlined frames; it is built as DWARF 5 (gcc 12's default),
DWARF 4 (``.debug_ranges``, 1-based file numbers), 64-bit DWARF and with zlib-compressed sections. The
C++ program adds namespaces, a class template with an inlined member, a lambda passed to ``std::sort``
(whose instances have no linkage name) and a local class.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import capstone
import pytest

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.errors import BinaryError
from profiler.symbolize.dwarf import DwarfResolver
from tests.support.targets import build_c
from tests.unit.test_symbolize_oracle import addr2line, disagreement, llvm_symbolizer

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("addr2line") is None, reason="gcc and binutils are needed"
)

C_SOURCE = r"""
#include <stdio.h>
static volatile int sink;
__attribute__((noinline)) void leaf(int x) { sink += x; }
static inline __attribute__((always_inline)) int level3(int x) {
    leaf(x);
    return x * 3;
}
static inline __attribute__((always_inline)) int level2(int x) {
    int y = level3(x + 1);
    leaf(y);
    return y;
}
static inline int level1(int x) {
    int z = level2(x) + level3(x);
    leaf(z);
    return z;
}
int main(int argc, char **argv) {
    int t = 0;
    for (int i = 0; i < argc * 1000; i++) t += level1(i);
    printf("%d\n", t);
    return 0;
}
"""

CXX_SOURCE = r"""
#include <algorithm>
#include <cstdio>
#include <vector>
namespace geo {
struct Shape { virtual ~Shape() {} virtual double area() const = 0; };
template <typename T> struct Box : Shape {
    T w, h;
    Box(T a, T b) : w(a), h(b) {}
    double area() const override { return scale(w) * h; }
    __attribute__((always_inline)) inline T scale(T v) const { return v * 2; }
};
static inline __attribute__((always_inline)) int sq(int x) { return x * x; }
__attribute__((noinline)) int sum_sorted(std::vector<int>& v) {
    std::sort(v.begin(), v.end(), [](int a, int b) { return sq(a) < sq(b); });
    int s = 0;
    for (int x : v) s += sq(x);
    return s;
}
}  // namespace geo
int main(int argc, char**) {
    std::vector<int> v;
    for (int i = 0; i < 100 * argc; i++) v.push_back((i * 7919) % 101 - 50);
    geo::Box<double> b(2, 3);
    geo::Shape* s = &b;
    std::printf("%d %f\n", geo::sum_sorted(v), s->area());
    struct Local { static int f(int x) { return x + 1; } };
    return Local::f(0);
}
"""

C_VARIANTS = {"dwarf5": [], "dwarf4": ["-gdwarf-4"], "dwarf64": ["-gdwarf64"], "zlib": ["-gz=zlib"]}


def build(tmp_path_factory, name: str, source: str, flags: list[str], cxx: bool = False) -> str:
    directory = tmp_path_factory.mktemp(name)
    source_path = directory / ("prog.cpp" if cxx else "prog.c")
    source_path.write_text(source)
    return build_c(str(source_path), str(directory), ["-O2", "-g", *flags], name=name, cxx=cxx)


@pytest.fixture(scope="module")
def c_programs(tmp_path_factory) -> dict[str, str]:
    return {
        variant: build(tmp_path_factory, f"inl-{variant}", C_SOURCE, flags) for variant, flags in C_VARIANTS.items()
    }


@pytest.fixture(scope="module")
def cxx_program(tmp_path_factory) -> str:
    return build(tmp_path_factory, "cxx", CXX_SOURCE, [], cxx=True)


def instructions(path: str, function: str) -> tuple[list[int], list[int]]:
    """(every instruction address, the call instructions) of ``function``, found with capstone."""
    elf = ElfFile(path)
    symbols = load_symbols(elf)
    assert symbols is not None
    start, size = symbols.address_of(function)  # type: ignore[misc]
    disassembler = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    code = list(disassembler.disasm(elf.read_svma(start, size), start))
    return [i.address for i in code], [i.address for i in code if i.mnemonic == "call"]


def assert_matches_tools(path: str, addresses: list[int], binutils_can_read: bool = True) -> None:
    resolver = DwarfResolver(ElfFile(path), load_symbols(ElfFile(path)))
    results = resolver.resolve(addresses)
    reference, second = addr2line(path, addresses), llvm_symbolizer(path, addresses)
    if not binutils_can_read:  # oracle rule 4
        if not second:
            pytest.skip("llvm-symbolizer is needed to check this build")
        reference, second = second, {}
    problems = []
    for address, frames in zip(addresses, results):
        assert frames is not None
        why = disagreement(frames, reference[address], second.get(address))
        if why:
            problems.append(f"0x{address:x}: {why}")
    assert not problems, "\n".join(problems[:10])
    assert resolver.notes == []


@pytest.mark.parametrize("variant", sorted(C_VARIANTS))
def test_c_main_matches_addr2line(c_programs, variant):
    every, calls = instructions(c_programs[variant], "main")
    assert len(calls) >= 4
    assert_matches_tools(c_programs[variant], every, binutils_can_read=variant != "dwarf64")


def test_c_debug_info_formats_agree(c_programs):
    """-g variants do not change the code, so every DWARF flavour must give the same frames."""
    every, _calls = instructions(c_programs["dwarf5"], "main")
    results = {}
    for variant, path in c_programs.items():
        assert instructions(path, "main")[0] == every
        frames = DwarfResolver(ElfFile(path)).resolve(every)
        results[variant] = [
            [(f.name, f.line, f.inlined, f.file and f.file.rsplit("/", 1)[1]) for f in c or []] for c in frames
        ]
    assert all(r == results["dwarf5"] for r in results.values())


@pytest.mark.parametrize("flags", [["-gsplit-dwarf"], ["-gsplit-dwarf", "-gdwarf-4"]], ids=["dwarf5", "dwarf4"])
def test_split_dwarf_gives_the_line_of_every_address(c_programs, tmp_path_factory, flags):
    """With -gsplit-dwarf the DIEs are in a .dwo file the resolver does not read, but the skeleton unit
    (DW_UT_skeleton in DWARF 5, a DW_UT_compile holding DW_AT_GNU_dwo_name in DWARF 4) keeps the line
    table in the binary: each address gets its function's symbol name and its own file:line, the
    innermost frame of the full build's chain, with no inlined frames."""
    split = build(tmp_path_factory, "inl-split", C_SOURCE, flags)
    every, _calls = instructions(c_programs["dwarf5"], "main")
    assert instructions(split, "main")[0] == every
    resolver = DwarfResolver(ElfFile(split), load_symbols(ElfFile(split)))
    got = resolver.resolve(every)
    full = DwarfResolver(ElfFile(c_programs["dwarf5"])).resolve(every)
    base = lambda file: file and file.rsplit("/", 1)[1]  # noqa: E731 (the two builds are in two directories)
    assert [[(f.name, base(f.file), f.line, f.inlined) for f in chain or []] for chain in got] == [
        [("main", base(chain[-1].file), chain[-1].line, False)] for chain in full
    ]
    assert resolver.notes == []


@pytest.mark.parametrize("flags", [[], ["-gdwarf-4"]], ids=["dwarf5", "dwarf4"])
def test_a_relative_compile_directory_is_taken_once(tmp_path, flags):
    """``-ffile-prefix-map=ROOT=.`` in ROOT/sub makes DW_AT_comp_dir ``./sub``, as Debian's libc has
    (``./misc``). Directory entry 0 is that same directory: joined to it again, every file read
    ``sub/sub/prog.c`` (binutils and llvm-symbolizer print that too; gdb ``./sub/prog.c``)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "prog.c").write_text(C_SOURCE)
    binary = tmp_path / "prog"
    subprocess.run(["gcc", "-O2", "-g", *flags, f"-ffile-prefix-map={tmp_path}=.", "-o", str(binary), "prog.c"],
                   check=True, cwd=sub)  # fmt: skip
    every, _calls = instructions(str(binary), "main")
    files = {f.file for chain in DwarfResolver(ElfFile(str(binary))).resolve(every) for f in chain or []}
    assert files == {"sub/prog.c"}


def test_c_call_chains_are_outermost_first(c_programs):
    path = c_programs["dwarf5"]
    _every, calls = instructions(path, "main")
    chains = DwarfResolver(ElfFile(path)).resolve(calls)
    deepest = max(chains, key=lambda c: len(c or []))
    assert deepest is not None and [f.name for f in deepest] == ["main", "level1", "level2", "level3"]
    assert [f.inlined for f in deepest] == [False, True, True, True]
    assert all(f.module is None and f.file and f.file.endswith("prog.c") for f in deepest)
    # each level's line is where the next level was called; main's is the call of level1 (line 21)
    assert [f.line for f in deepest] == [21, 15, 10, 6]


def test_cxx_functions_match_addr2line(cxx_program):
    addresses = []
    for function in ("main", "_ZN3geo10sum_sortedERSt6vectorIiSaIiEE"):
        every, _calls = instructions(cxx_program, function)
        addresses += every
    assert_matches_tools(cxx_program, addresses)


def test_cxx_names_are_demangled(cxx_program):
    every, _calls = instructions(cxx_program, "_ZN3geo10sum_sortedERSt6vectorIiSaIiEE")
    names = {f.name for frames in DwarfResolver(ElfFile(cxx_program)).resolve(every) for f in frames or []}
    assert "geo::sum_sorted(std::vector<int, std::allocator<int> >&)" in names
    assert any(name.startswith("std::") for name in names)  # inlined std::sort parts with linkage names


def test_uncovered_addresses_give_empty_lists(c_programs):
    resolver = DwarfResolver(ElfFile(c_programs["dwarf5"]))
    assert resolver.resolve([0, 1 << 40, (1 << 64) - 1, -5]) == [[], [], [], []]
    assert resolver.notes == []


def test_results_are_cached_per_address(c_programs):
    path = c_programs["dwarf5"]
    every, _calls = instructions(path, "main")
    resolver = DwarfResolver(ElfFile(path))
    first = resolver.resolve(every)
    units = resolver.units_loaded
    again = resolver.resolve(list(reversed(every)))
    assert again == list(reversed(first)) and all(a is b for a, b in zip(again, reversed(first)))
    assert resolver.units_loaded == units == 1


def test_deadline_gives_none_for_unresolved_addresses(c_programs):
    path = c_programs["dwarf5"]
    every, calls = instructions(path, "main")
    resolver = DwarfResolver(ElfFile(path))
    done = resolver.resolve(calls[:1])
    late = resolver.resolve(calls[:3], deadline=time.monotonic() - 1)
    assert late[0] == done[0] and late[1:] == [None, None]  # cached results still come back
    assert None not in resolver.resolve(calls, deadline=time.monotonic() + 60)
    assert None not in resolver.resolve(every)


def test_file_without_debug_info_raises_binary_error(c_programs, tmp_path):
    stripped = tmp_path / "stripped"
    subprocess.run(["strip", "-g", "-o", str(stripped), c_programs["dwarf5"]], check=True)
    with pytest.raises(BinaryError):
        DwarfResolver(ElfFile(str(stripped)))
