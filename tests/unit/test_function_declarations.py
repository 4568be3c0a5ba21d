"""Where each frame's function is declared (``FrameInfo.function_file``/``function_line``, issue 44), and the
root of its source tree, on real binaries, against ``llvm-symbolizer --verbose`` ("Function start filename",
"Function start line": DW_AT_decl_file and DW_AT_decl_line) at sampled addresses (fixed seed):

* pyenv's libpython3.12 (built in its source tree): addresses inside ``_PyEval_EvalFrameDefault``, whose
  lines are in ``Python/bytecodes.c`` and ``Python/generated_cases.c.h`` but which is declared in
  ``Python/ceval.c``, and in random functions;
* Debian's python3.11, through its debug file (built out of tree, in ``build-static``, with LTO: the
  declarations are in other units than the code, reached through DW_FORM_ref_addr).

Binaries that are not installed are skipped.
"""

from __future__ import annotations

import os
import posixpath
import random
import shutil
import subprocess
from collections.abc import Sequence

import pytest

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.symbolize.dwarf import DwarfResolver
from profiler.symbolize.line_header import source_root
from tests.unit.test_symbolize_libs import LIBPYTHON312, spread

SEED = 20260510
#: Debian 12's python3.11 (3.11.2-6+deb12u9) and its debug file from python3.11-dbg
DEBIAN_PYTHON = "/usr/bin/python3.11"
DEBIAN_PYTHON_DEBUG = "/usr/lib/debug/.build-id/c5/61f3aa7232f2bd6ac6d56bd475f1c154a00486.debug"

Declared = tuple[str, str | None, int | None]  #: (function, file, line)


def llvm_declarations(path: str, addresses: Sequence[int]) -> dict[int, list[Declared]]:
    """Per address, its frames outermost first as ``llvm-symbolizer --verbose --inlining`` declares them."""
    out = subprocess.run(["llvm-symbolizer", "--verbose", "--inlining", "--print-address", f"--obj={path}",
                          *(hex(a) for a in addresses)], capture_output=True, text=True, check=True).stdout  # fmt: skip
    found: dict[int, list[Declared]] = {}
    for block in out.strip("\n").split("\n\n"):
        lines = block.splitlines()
        levels: list[Declared] = []
        for text in lines[1:]:
            if not text.startswith(" "):
                levels.insert(0, (text, None, None))
            elif text.startswith("  Function start filename: "):  # (empty for most inlined levels)
                file = text.split(": ", 1)[1].strip()
                levels[0] = (levels[0][0], posixpath.normpath(file) if file else None, levels[0][2])
            elif text.startswith("  Function start line: "):
                levels[0] = (levels[0][0], levels[0][1], int(text.split(": ", 1)[1]) or None)
        found[int(lines[0], 16)] = levels
    return found


def compare(path: str, debug_path: str, addresses: list[int]) -> tuple[DwarfResolver, int, int]:
    """Every frame llvm-symbolizer names alike declared alike (by line alone where it gives no file, as for
    most inlined frames); returns the resolver, the frames compared and those of them compared by file too."""
    resolver = DwarfResolver(ElfFile(debug_path), load_symbols(ElfFile(path)))
    reference = llvm_declarations(debug_path, addresses)
    problems, compared, with_file = [], 0, 0
    for address, frames in zip(addresses, resolver.resolve(addresses)):
        for frame, (name, file, line) in zip(frames or [], reference[address]):
            if frame.name != name or line is None:  # (names differ where nprof names better: oracle tests)
                continue
            compared += 1
            with_file += file is not None
            if (frame.function_file if file is not None else None, frame.function_line) != (file, line):
                problems.append(f"0x{address:x} {name}: {frame.function_file}:{frame.function_line}, not {file}:{line}")
    assert not problems, "\n".join(problems[:10])
    assert resolver.notes == []
    return resolver, compared, with_file


needs_llvm = pytest.mark.skipif(shutil.which("llvm-symbolizer") is None, reason="llvm-symbolizer is not installed")


@needs_llvm
@pytest.mark.skipif(not os.path.exists(LIBPYTHON312), reason=f"no {LIBPYTHON312}")
def test_libpython_frames_are_declared_where_llvm_says_and_the_eval_loop_in_ceval_c():
    symbols = load_symbols(ElfFile(LIBPYTHON312))
    assert symbols is not None
    rng = random.Random(SEED)
    start, size = next((int(a), int(s)) for a, s, n in zip(symbols.addrs, symbols.sizes, symbols.function_names())
                       if n == "_PyEval_EvalFrameDefault")  # fmt: skip
    loop = [start + rng.randrange(size) for _ in range(40)]
    resolver, compared, with_file = compare(LIBPYTHON312, LIBPYTHON312, loop + spread(symbols, 40, rng))
    assert compared >= 80 and with_file >= 60, (compared, with_file)
    outer = [frames[0] for frames in resolver.resolve(loop) if frames]
    sampled_in = {posixpath.basename(f.file or "") for f in outer}
    assert {posixpath.basename(f.function_file or "") for f in outer} == {"ceval.c"}, "one function, one file"
    assert sampled_in - {"ceval.c"}, f"the lines sampled were all in ceval.c ({sampled_in}): nothing to show"
    root = outer[0].source_root
    assert root is not None and root.endswith("/Python-3.12.1"), root  # pyenv builds in the source tree
    assert all(f.file is not None and f.file.startswith(root + "/") for f in outer)


@needs_llvm
@pytest.mark.skipif(not os.path.exists(DEBIAN_PYTHON_DEBUG), reason=f"no {DEBIAN_PYTHON_DEBUG} (python3.11-dbg)")
def test_an_lto_build_out_of_its_tree_is_declared_across_units_and_rooted_above_its_build_directory():
    symbols = load_symbols(ElfFile(DEBIAN_PYTHON_DEBUG))
    assert symbols is not None
    rng = random.Random(SEED)
    resolver, compared, with_file = compare(DEBIAN_PYTHON, DEBIAN_PYTHON_DEBUG, spread(symbols, 60, rng))
    assert compared >= 40 and with_file >= 30, (compared, with_file)
    [[eval_loop, *_]] = resolver.resolve([symbols.address_of("_PyEval_EvalFrameDefault")[0] + 3000])
    assert (eval_loop.function_file, eval_loop.function_line) == ("Python/ceval.c", 1634)
    # Debian's build directory is build-static, its sources ../Python, ../Include: the tree is the one above
    assert eval_loop.source_root == "/build/reproducible-path/python3.11-3.11.2"


@pytest.mark.parametrize(
    "comp_dir, dirs, root",
    [
        # pyenv (python-build): built in the source tree, directories relative to it
        ("/tmp/python-build.20260509073544.228/Python-3.12.1", ["./Modules", "/usr/include", "./Include"],
         "/tmp/python-build.20260509073544.228/Python-3.12.1"),
        # Debian: built in build-static, sources one level up
        ("/build/reproducible-path/python3.11-3.11.2/build-static", ["../Programs", "../Include/internal",
         "/usr/include/x86_64-linux-gnu/bits"], "/build/reproducible-path/python3.11-3.11.2"),
        ("/home/u/proj/build/src", ["../../lib", "../gen"], "/home/u/proj"),
        # relative (Debian's glibc: -ffile-prefix-map=DIR=.), whose paths are relative already
        ("./elf", ["../include"], None),
        # no tree of its own: the root directory, or one right under it
        ("/tmp/b", ["../src"], None),
        ("/", [], None),
    ],
)
def test_source_root_is_the_compilation_directory_or_where_its_include_directories_climb(comp_dir, dirs, root):
    assert source_root(comp_dir, dirs) == root
