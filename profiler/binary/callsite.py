"""Whether the bytes right before an address are a call instruction ending there, decoded with capstone:
what makes a word on a stack a plausible return address (a return address is where a call returns to).
The stack scan (``unwind/scan.py``) asks it of the words it tries. Pure: bytes in, no file, no pid.
capstone is imported at the first question, not with the module: most runs never scan a stack
(docs/decisions/start-up-latency.md).
"""

from __future__ import annotations

from typing import Any

#: the longest x86-64 call instruction: FF /2 with REX, ModRM, SIB and disp32 (Intel SDM vol. 2, CALL)
MAX_CALL_LENGTH = 8
#: ``call rel32``: E8 cd (Intel SDM vol. 2, CALL), the only direct near call in 64-bit mode
CALL_REL32 = 0xE8
#: what the code before an address is: no call (False), an indirect call (True), or a direct call to this
#: address (int, in the same address space as the one asked about)
CallBefore = bool | int

_disassembler: Any = None  #: ``capstone.Cs`` for x86-64, made at the first question


def _x86_64() -> Any:
    global _disassembler
    if _disassembler is None:
        import capstone

        _disassembler = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    return _disassembler


def call_before(code: bytes, address: int) -> CallBefore:
    """``code``: the ``MAX_CALL_LENGTH`` bytes that end at ``address`` (fewer where the file has none)."""
    if len(code) != MAX_CALL_LENGTH:
        return False
    if code[-5] == CALL_REL32:
        return address + int.from_bytes(code[-4:], "little", signed=True)
    disassembler = _x86_64()
    for length in (2, 3, 4, 6, 7, 8):  # an indirect call (FF /2), of any encoding ending at ``address``
        insn = next(disassembler.disasm_lite(code[-length:], address - length, 1), None)
        if insn is not None and insn[1] == length and insn[2] == "call":
            return True
    return False
