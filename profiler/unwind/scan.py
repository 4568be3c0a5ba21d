"""The last resort for a frame nothing else can step: a search of the copied stack above it for its return
address, each candidate checked to follow a call instruction.

A word is taken when it lies in a module's executable range, the bytes before it decode as a ``call``
ending there (``binary/callsite.py``), and, for a direct call, the call's target is the function being
stepped, a PLT stub, or where the function's start is unknown, at least in its own module. The caller keeps
the callee's rbp; the frame is marked ``UnwindMethod.SCAN``.
Why each check: docs/decisions/stack-scan.md."""

from __future__ import annotations

from profiler.unwind.address_space import AddressSpace, ModuleEntry
from profiler.unwind.stack import StackWindow

#: words searched above a caller frame's stack pointer, as Breakpad does (``kRASearchWords = 30``,
#: processor/stackwalker.cc); the innermost frame gets four times as many, as there too (its locals and
#: saved registers lie between its stack pointer and its return address, a caller's mostly not)
SCAN_WORDS = 30
SCAN_WORDS_INNERMOST = 4 * SCAN_WORDS


def find_return_address(
    space: AddressSpace,
    sp: int,
    window: StackWindow,
    words: int,
    callee_start: int | None,
    callee: ModuleEntry | None = None,
) -> tuple[int, int] | None:
    """(address of the word, return address) of the first of ``words`` words at or above ``sp`` that passes
    the checks; None if none does. ``callee_start``: the avma of the first instruction of the function being
    stepped, if known; else ``callee``, the code mapping it runs in, if any (check 3)."""
    for slot in range(sp, sp + 8 * words, 8):
        ra = window.read(slot)
        if ra is None:
            return None  # the end of the copy
        entry = space.find(ra)
        if entry is None or entry.obj is None:
            continue
        call = entry.obj.call_before(ra - entry.bias)
        if call is False:
            continue
        if call is True or _may_call(call + entry.bias, callee_start, callee) or entry.obj.in_plt(call):
            return slot, ra
    return None


def _may_call(target: int, callee_start: int | None, callee: ModuleEntry | None) -> bool:
    """Whether a ``call rel32`` to ``target`` may have entered the function being stepped (check 3)."""
    if callee_start is not None:
        return target == callee_start
    return callee is None or callee.start <= target < callee.end
