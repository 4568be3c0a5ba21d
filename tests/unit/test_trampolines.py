"""Known trampolines in file-less code (``profiler/unwind/trampolines.py``), checked against the bytes of
the trampolines as the interpreters here were built."""

from __future__ import annotations

import os

import pytest

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.unwind.trampolines import AFTER, BEFORE, CPYTHON_PERF, recognise

PYENV = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
LIBPYTHONS = [os.path.join(PYENV, "versions", v, "lib", f"libpython{v.rsplit('.', 1)[0]}.so.1.0")
              for v in ("3.12.1", "3.13.0")]  # fmt: skip


@pytest.mark.parametrize("path", LIBPYTHONS, ids=lambda p: os.path.basename(p))
def test_cpythons_perf_trampoline_is_recognised_at_its_return_address(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    elf = ElfFile(path)
    start, size = load_symbols(elf).address_of("_Py_trampoline_func_start")  # type: ignore[misc]
    code = elf.read_svma(start, 16)
    ra = 6  # after "sub $8,%rsp; call *%rcx"
    assert recognise(code[ra - BEFORE : ra + AFTER]) is CPYTHON_PERF
    assert all(recognise(code[at - BEFORE : at + AFTER]) is None for at in range(BEFORE, 16 - AFTER) if at != ra)


def test_other_code_is_not_a_trampoline():
    frame_pointer_variant = b"\x55\x48\x89\xe5\xff\xd1\x5d\xc3\x90\x90\x90"  # push rbp; mov rsp,rbp; call; pop
    assert recognise(frame_pointer_variant) is None
    assert recognise(b"\x48\x83\xec\x08\xff\xd2" + b"\x48\x83\xc4\x08\xc3") is None  # call *%rdx
    assert recognise(b"") is None
