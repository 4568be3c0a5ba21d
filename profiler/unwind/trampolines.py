"""Frames of known call trampolines in file-less code, which has no CFI and keeps no frame pointer.

CPython 3.12 and 3.13 run with ``-X perf`` (or ``PYTHONPERFSUPPORT=1``) copy one trampoline per code
object into anonymous executable memory, so that ``perf`` can name each Python function by its copy's
address. The trampoline (``Python/asm_trampoline.S``; the same bytes in 3.12.1's and 3.13.0's
``_Py_trampoline_func_start``, disassembled here) is::

    48 83 ec 08    sub  $0x8, %rsp
    ff d1          call *%rcx            <- the eval loop returns here
    48 83 c4 08    add  $0x8, %rsp
    c3             ret

It saves no register and sets no frame pointer, so the rbp chain through it, the fallback for file-less
code, skipped to a frame of libpython's (which keeps none either): 236 of 237 samples of a 3.12 program
stopped there, losing every native frame outward of its innermost eval loop. At the return address,
the trampoline's frame is fixed: the caller's stack pointer is 16 bytes up (the 8 it reserved and its own
return address), that return address is at 8, and every other register is the caller's.

Later CPythons' trampoline pushes rbp and sets it (``push %rbp; mov %rsp,%rbp; call *%rcx; pop %rbp``),
which the rbp chain walks as it is.
"""

from __future__ import annotations

from typing import NamedTuple


class Trampoline(NamedTuple):
    """A trampoline recognised at a return address by the bytes around it."""

    before: bytes  #: the bytes that end at the return address (through the call)
    after: bytes  #: the bytes that start at it
    cfa_offset: int  #: the caller's stack pointer, from the stack pointer at the return address
    ra_offset: int  #: where the caller's return address is, from the same stack pointer


CPYTHON_PERF = Trampoline(b"\x48\x83\xec\x08\xff\xd1", b"\x48\x83\xc4\x08\xc3", 16, 8)
TRAMPOLINES = (CPYTHON_PERF,)
#: bytes read around a return address to recognise every trampoline above
BEFORE = max(len(t.before) for t in TRAMPOLINES)
AFTER = max(len(t.after) for t in TRAMPOLINES)


def recognise(code: bytes) -> Trampoline | None:
    """The trampoline whose return address is ``code[BEFORE]`` (``code`` read from BEFORE bytes ahead of
    it, BEFORE + AFTER bytes), or None."""
    for t in TRAMPOLINES:
        if code[BEFORE - len(t.before) : BEFORE] == t.before and code[BEFORE : BEFORE + len(t.after)] == t.after:
            return t
    return None
