"""Names for PLT stubs, ``name@plt`` as objdump and perf print them.

A stub in ``.plt``, ``.plt.sec`` or ``.plt.got`` names its target by the GOT slot it jumps through (the
slot's relocation names the symbol; an ``R_X86_64_IRELATIVE`` slot, the function at its addend) or by the
``.rela.plt`` index it pushes for the resolver (System V x86-64 psABI, "Procedure Linkage Table"). Stubs
that match neither (the resolver's own entry) stay unnamed.
What was unnamed before, and the encodings met: docs/decisions/plt-names.md."""

from __future__ import annotations

import struct

import numpy as np

from profiler.binary.elf import ElfFile, SectionInfo
from profiler.binary.symbols import ELF64_SYM, SymbolTable, c_string

# System V x86-64 psABI, "Relocation Types"
R_X86_64_GLOB_DAT = 6
R_X86_64_JUMP_SLOT = 7
R_X86_64_IRELATIVE = 37  #: no symbol: the addend is the address of an IFUNC (its symbol's value)
# ELF gABI, "Relocation Entries": Elf64_Rela; r_info holds the symbol index above the type
ELF64_RELA = np.dtype([("r_offset", "<u8"), ("r_info", "<u8"), ("r_addend", "<i8")])

ENDBR64 = b"\xf3\x0f\x1e\xfa"
BND = 0xF2
JMP_RIP = b"\xff\x25"  #: jmp *disp32(%rip): FF /4 with ModRM 0x25 (Intel SDM vol. 2, JMP)
PUSH_IMM32 = 0x68
PUSH_RIP = b"\xff\x35"  #: push disp32(%rip): FF /6 with ModRM 0x35, how the first .plt entry starts
#: what a stub's name is its target's name followed by, as objdump and perf print it
PLT_SUFFIX = "@plt"
#: section -> stub size when its sh_entsize is 0 (GNU ld's x86-64 layouts: 16-byte .plt and .plt.sec
#: entries, 8-byte .plt.got entries without IBT)
PLT_SECTIONS = {".plt": 16, ".plt.sec": 16, ".plt.got": 8}


def plt_section(elf: ElfFile, svma: int) -> tuple[str, SectionInfo] | None:
    """The PLT section holding ``svma`` (its name and header), if any."""
    for name in PLT_SECTIONS:
        info = elf.sections.get(name)
        if info is not None and info.sh_addr <= svma < info.sh_addr + info.sh_size:
            return name, info
    return None


class PltStubs:
    """The named PLT stubs of one file: sorted starts, their ends, and the symbol each leads to."""

    def __init__(self, starts: list[int], size: list[int], names: list[str]) -> None:
        order = np.argsort(np.asarray(starts, dtype=np.uint64), kind="stable")
        self.starts = np.asarray(starts, dtype=np.uint64)[order]
        self.ends = self.starts + np.asarray(size, dtype=np.uint64)[order]
        self.names = [names[i] for i in order.tolist()]

    def __len__(self) -> int:
        return len(self.names)

    def name_many(self, svmas: list[int]) -> list[str | None]:
        """For each address, the symbol of the stub it lies in (the caller adds ``@plt``), or None."""
        if not self.names:
            return [None] * len(svmas)
        q = np.asarray(svmas, dtype=np.uint64)
        idx = np.searchsorted(self.starts, q, side="right").astype(np.int64) - 1
        return [
            self.names[i] if i >= 0 and addr < int(self.ends[i]) else None
            for i, addr in zip(idx.tolist(), q.tolist())
        ]


def load_plt_stubs(elf: ElfFile) -> PltStubs:
    """The stubs of ``elf``'s PLT sections that can be named; empty when it has none (or no dynamic
    symbols: a static executable's PLT only calls IFUNCs, whose relocations carry no symbol)."""
    jump_slots, by_index = _slot_symbols(elf)
    starts: list[int] = []
    sizes: list[int] = []
    names: list[str] = []
    for section, default_size in PLT_SECTIONS.items():
        info = elf.sections.get(section)
        data = elf.section_data(section)
        if info is None or data is None:
            continue
        size = info.sh_entsize or default_size
        code = bytes(data)
        for at in range(0, len(code) - size + 1, size):
            name = _stub_target(code[at : at + size], info.sh_addr + at, jump_slots, by_index)
            if name:
                starts.append(info.sh_addr + at)
                sizes.append(size)
                names.append(name)
    return PltStubs(starts, sizes, names)


def _stub_target(stub: bytes, addr: int, slots: dict[int, str], by_index: list[str | None]) -> str | None:
    """The symbol one stub leads to: through the GOT slot it jumps through, else the ``.rela.plt`` index it
    pushes."""
    at = len(ENDBR64) if stub.startswith(ENDBR64) else 0
    if at < len(stub) and stub[at] == BND:
        at += 1
    if stub[at : at + 2] == JMP_RIP and at + 6 <= len(stub):
        (disp,) = struct.unpack_from("<i", stub, at + 2)
        return slots.get(addr + at + 6 + disp)  # rip-relative: from the end of the 6-byte instruction
    if at < len(stub) and stub[at] == PUSH_IMM32 and at + 5 <= len(stub):
        (index,) = struct.unpack_from("<I", stub, at + 1)
        return by_index[index] if index < len(by_index) else None
    return None


def _slot_symbols(elf: ElfFile) -> tuple[dict[int, str], list[str | None]]:
    """GOT slot address -> symbol name, from the JUMP_SLOT and GLOB_DAT relocations (their symbol) and the
    IRELATIVE ones (the dynamic symbol at their addend); and the names of ``.rela.plt``'s entries by index."""
    dynsym = elf.section_data(".dynsym")
    dynstr = elf.section_data(".dynstr")
    if dynsym is None or dynstr is None:
        return {}, []
    syms = np.frombuffer(dynsym, dtype=ELF64_SYM, count=len(dynsym) // ELF64_SYM.itemsize)
    strings = bytes(dynstr)
    tables = []
    for section in (".rela.plt", ".rela.dyn"):
        data = elf.section_data(section)
        if data is not None:
            relas = np.frombuffer(data, dtype=ELF64_RELA, count=len(data) // ELF64_RELA.itemsize)
            kinds = relas["r_info"] & 0xFFFFFFFF
            if section == ".rela.dyn":  # mostly R_X86_64_RELATIVE: thousands, none named
                wanted = (kinds == R_X86_64_JUMP_SLOT) | (kinds == R_X86_64_GLOB_DAT) | (kinds == R_X86_64_IRELATIVE)
                relas, kinds = relas[wanted], kinds[wanted]
            tables.append((section, relas, kinds))
    ifuncs = _functions_at(syms, strings, [r["r_addend"][kinds == R_X86_64_IRELATIVE] for _s, r, kinds in tables])
    slots: dict[int, str] = {}
    by_index: list[str | None] = []
    for section, relas, kinds in tables:
        rows = zip(relas["r_offset"].tolist(), relas["r_info"].tolist(), relas["r_addend"].tolist(), kinds.tolist())
        for offset, info, addend, kind in rows:
            name: str | None = None
            if kind == R_X86_64_IRELATIVE:
                name = ifuncs.get(addend)
            elif kind in (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT) and 0 < info >> 32 < len(syms):
                name = c_string(strings, int(syms["st_name"][info >> 32])) or None
            if section == ".rela.plt":
                by_index.append(name)
            if name is not None:
                slots[offset] = name
    return slots, by_index


def _functions_at(syms: np.ndarray, strings: bytes, addends: list[np.ndarray]) -> dict[int, str]:
    """Address -> the name of the dynamic function symbol there, for the IRELATIVE addends (each an IFUNC's
    value), picked among aliases as every symbol table is (``SymbolTable``)."""
    values: list[int] = np.concatenate(addends).tolist() if addends else []
    if not values:
        return {}
    hits = SymbolTable(syms.copy(), strings, ".dynsym").lookup_many(np.asarray(values, dtype=np.uint64))
    return {value: hit[0] for value, hit in zip(values, hits) if hit is not None and hit[1] == value}
