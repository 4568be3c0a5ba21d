"""The last resort for a frame nothing else can step: a search of the copied stack above it for its return
address, each candidate checked with capstone to follow a call instruction.

The policy asks for it where a frame has no CFI row and its code gives no frame to follow: the rbp chain
fails its checks, or leads to an address in no module (rbp held data, as in hand-written kernels, or in
code built with neither CFI nor frame pointers whose function prologue analysis cannot read). As in
Breakpad's stack scanning (``processor/stackwalker.cc``, ``ScanForReturnAddress``), the words above the
stack pointer are tried in turn; one is taken as the return address when

1. it lies in an executable range of a module (file-backed: its bytes can be read without the target);
2. the bytes before it decode as a ``call`` ending exactly there: a return address is where a call returns;
3. for a direct call (``call rel32``), the call's target is the function being stepped, or a PLT stub. A
   return address an earlier call left on the stack, not overwritten yet (stale), passes 1 and 2; most
   such calls called another function, and this rejects them.

The caller's registers are the stack pointer above the word and the callee's rbp (nothing says whether
the callee changed it); the frame is marked ``UnwindMethod.SCAN``.
"""

from __future__ import annotations

import capstone

from profiler.binary.plt import PLT_SECTIONS
from profiler.unwind.address_space import AddressSpace, ModuleEntry
from profiler.unwind.stack import StackWindow

#: words searched above a caller frame's stack pointer, as Breakpad does (``kRASearchWords = 30``,
#: processor/stackwalker.cc); the innermost frame gets four times as many, as there too (its locals and
#: saved registers lie between its stack pointer and its return address, a caller's mostly not)
SCAN_WORDS = 30
SCAN_WORDS_INNERMOST = 4 * SCAN_WORDS
#: the longest x86-64 call instruction: FF /2 with REX, ModRM, SIB and disp32 (Intel SDM vol. 2, CALL)
MAX_CALL_LENGTH = 8
#: ``call rel32``: E8 cd (Intel SDM vol. 2, CALL), the only direct near call in 64-bit mode
CALL_REL32 = 0xE8
#: memo entries kept before the memo is cleared (a bound on memory)
MAX_MEMO = 1 << 16

_DISASSEMBLER = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)

#: what the memo holds for a word: not a return address (False), after an indirect call (True), or after
#: a direct call to this avma (int)
_CallBefore = bool | int


class StackScan:
    """Finds return addresses on a copied stack for one process's unwinder, remembering per word what the
    code before it is."""

    def __init__(self, space: AddressSpace) -> None:
        self.space = space
        self._calls: dict[int, _CallBefore] = {}

    def forget(self) -> None:
        """Drop what is known of the code: the address space changed (a library unloaded, another loaded)."""
        self._calls.clear()

    def find(self, sp: int, window: StackWindow, words: int, callee_start: int | None) -> tuple[int, int] | None:
        """(address of the word, return address) of the first word at or above ``sp`` that passes the checks,
        among ``words`` words; None if none does. ``callee_start``: the avma of the first instruction of the
        function being stepped, if known (check 3)."""
        calls = self._calls
        if len(calls) >= MAX_MEMO:
            calls.clear()
        for slot in range(sp, sp + 8 * words, 8):
            ra = window.read(slot)
            if ra is None:
                return None  # the end of the copy
            call = calls.get(ra)
            if call is None:
                call = calls[ra] = self._call_before(ra)
            if call is False:
                continue
            if call is True or callee_start is None or call == callee_start or self._in_plt(call):
                return slot, ra
        return None

    def _call_before(self, ra: int) -> _CallBefore:
        entry = self.space.find(ra)
        if entry is None or entry.obj is None or ra - MAX_CALL_LENGTH < entry.start:
            return False
        svma = ra - entry.bias
        code = entry.obj.elf.read_svma(svma - MAX_CALL_LENGTH, MAX_CALL_LENGTH)
        if len(code) != MAX_CALL_LENGTH:
            return False
        if code[-5] == CALL_REL32:  # a direct call: its target is known
            return ra + int.from_bytes(code[-4:], "little", signed=True)
        for length in (2, 3, 4, 6, 7, 8):  # an indirect one (FF /2), of any encoding ending at ra
            insn = next(_DISASSEMBLER.disasm_lite(code[-length:], svma - length, 1), None)
            if insn is not None and insn[1] == length and insn[2] == "call":
                return True
        return False

    def _in_plt(self, avma: int) -> bool:
        """Whether ``avma`` is in a PLT section: a direct call to a function of another module goes through
        its caller's PLT stub, not to the function."""
        entry: ModuleEntry | None = self.space.find(avma)
        if entry is None or entry.obj is None:
            return False
        svma = avma - entry.bias
        sections = entry.obj.elf.sections
        for name in PLT_SECTIONS:
            info = sections.get(name)
            if info is not None and info.sh_addr <= svma < info.sh_addr + info.sh_size:
                return True
        return False
