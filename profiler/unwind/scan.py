"""The last resort for a frame nothing else can step: a search of the copied stack above it for its return
address, each candidate checked to follow a call instruction.

The policy asks for it where a frame has no CFI row and its code gives no frame to follow: the rbp chain
fails its checks, or leads to an address in no module (rbp held data, as in hand-written kernels, or in
code built with neither CFI nor frame pointers whose function prologue analysis cannot read). As in
Breakpad's stack scanning (``processor/stackwalker.cc``, ``ScanForReturnAddress``), the words above the
stack pointer are tried in turn; one is taken as the return address when

1. it lies in an executable range of a module (file-backed: its bytes are read from the file);
2. the bytes before it decode as a ``call`` ending exactly there (``binary/callsite.py``, remembered per
   address by the file's ``ObjectFile``);
3. for a direct call (``call rel32``), the call's target is the function being stepped, or a PLT stub. A
   return address an earlier call left on the stack, not overwritten yet (stale), passes 1 and 2; most
   such calls called another function, and this rejects them. Where the function's start is not known (a
   stripped library without CFI: a Rust extension), the target must at least lie in the code mapping the
   function runs in, since a ``call rel32`` cannot leave its module but through a PLT stub: a stale
   return address into libc's ``calloc``, after its call of a libc function, was taken for the caller of
   orjson's code in 74% of the samples of a program serializing with it (a sweep).

The caller's registers are the stack pointer above the word and the callee's rbp (nothing says whether
the callee changed it); the frame is marked ``UnwindMethod.SCAN``.
"""

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
