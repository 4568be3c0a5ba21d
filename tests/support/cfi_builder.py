"""Hand-assembled CFI for opcode-level tests: CIE/FDE bytes of .eh_frame or .debug_frame, and .eh_frame_hdr.

In the spirit of gimli's test assembler: a test writes the CFA program it means, one instruction per
line with a comment, and gets the section bytes. Encodings are DWARF 5 table 7.29 and LSB 5.0 10.6.
"""

from __future__ import annotations

import struct

from profiler.binary.cfi.eh_frame_hdr import parse_eh_frame_hdr
from profiler.binary.cfi.entries import CfiSection
from profiler.binary.cfi.table import CfiSource, UnwindTable

DW_EH_PE_pcrel_sdata4 = 0x1B  # DW_EH_PE_pcrel | DW_EH_PE_sdata4: what gcc emits for initial_location
DW_EH_PE_datarel_sdata4 = 0x3B  # the .eh_frame_hdr table encoding


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)


# --- DW_CFA instructions (DWARF 5 section 6.4.2) -------------------------------------------------------


def advance_loc(delta: int) -> bytes:
    return bytes([0x40 | delta]) if delta < 0x40 else b"\x02" + bytes([delta])  # advance_loc / advance_loc1


def def_cfa(reg: int, off: int) -> bytes:
    return b"\x0c" + uleb(reg) + uleb(off)


def def_cfa_offset(off: int) -> bytes:
    return b"\x0e" + uleb(off)


def def_cfa_register(reg: int) -> bytes:
    return b"\x0d" + uleb(reg)


def offset(reg: int, factored: int) -> bytes:
    return bytes([0x80 | reg]) + uleb(factored)  # DW_CFA_offset: saved at CFA + factored * data_align


def restore(reg: int) -> bytes:
    return bytes([0xC0 | reg])


def register(reg: int, holder: int) -> bytes:
    return b"\x09" + uleb(reg) + uleb(holder)  # DW_CFA_register: reg's value is in holder


def expression(op: int, reg: int, expr: bytes) -> bytes:
    """DW_CFA_expression (0x10) / DW_CFA_val_expression (0x16) with a DWARF expression block."""
    return bytes([op]) + uleb(reg) + uleb(len(expr)) + expr


def def_cfa_expression(expr: bytes) -> bytes:
    return b"\x0f" + uleb(len(expr)) + expr


def breg(reg: int, off: int) -> bytes:
    """DW_OP_breg0 + reg (reg < 32) with an SLEB128 offset."""
    return bytes([0x70 + reg]) + sleb(off)


# --- sections -----------------------------------------------------------------------------------------


class CfiBuilder:
    """Entries of one section at stated address ``svma``; offsets returned are section offsets."""

    def __init__(self, svma: int = 0x10000, eh_frame: bool = True, dwarf64: bool = False) -> None:
        self.svma = svma
        self.eh_frame = eh_frame
        self.dwarf64 = dwarf64
        self.data = bytearray()
        self.fdes: list[tuple[int, int]] = []  # (initial_location, offset)
        self._encodings: dict[int, int] = {}  # CIE offset -> its FDE pointer encoding

    def _entry(self, id_field: bytes, body: bytes) -> int:
        at = len(self.data)
        content = id_field + body
        content += b"\0" * (-(len(content) + (12 if self.dwarf64 else 4)) % 8)  # DW_CFA_nop padding
        if self.dwarf64:
            self.data += struct.pack("<IQ", 0xFFFFFFFF, len(content))
        else:
            self.data += struct.pack("<I", len(content))
        self.data += content
        return at

    def _id_size(self) -> int:
        return 8 if self.dwarf64 and not self.eh_frame else 4

    def _header_size(self) -> int:
        return 12 if self.dwarf64 else 4

    def cie(
        self,
        instructions: bytes,
        augmentation: bytes = b"zR",
        code_align: int = 1,
        data_align: int = -8,
        ra: int = 16,
        fde_encoding: int = DW_EH_PE_pcrel_sdata4,
        version: int = 1,
    ) -> int:
        if self.eh_frame:
            id_field = b"\0\0\0\0"
        else:
            id_field = b"\xff" * self._id_size()
        body = bytes([version]) + augmentation + b"\0"
        if version >= 4:
            body += bytes([8, 0])  # address_size, segment_selector_size
        body += uleb(code_align) + sleb(data_align) + (bytes([ra]) if version == 1 else uleb(ra))
        if augmentation.startswith(b"z"):
            aug = b"".join(bytes([fde_encoding]) if c == ord("R") else b"" for c in augmentation[1:])
            body += uleb(len(aug)) + aug
        at = self._entry(id_field, body + instructions)
        self._encodings[at] = fde_encoding
        return at

    def fde(self, cie_at: int, start: int, size: int, instructions: bytes, augmented: bool = True) -> int:
        at = len(self.data)
        id_pos = at + self._header_size()
        if self.eh_frame:
            id_field = struct.pack("<I", id_pos - cie_at)
            field_svma = self.svma + id_pos + 4
            encoding = self._encodings.get(cie_at, DW_EH_PE_pcrel_sdata4)
            if encoding == DW_EH_PE_pcrel_sdata4:
                body = struct.pack("<ii", start - field_svma, size)
            else:  # DW_EH_PE_udata8, absolute
                body = struct.pack("<QQ", start, size)
            body += uleb(0) if augmented else b""
        else:
            id_field = struct.pack("<Q" if self.dwarf64 else "<I", cie_at)
            body = struct.pack("<QQ", start, size)
        self.fdes.append((start, at))
        return self._entry(id_field, body + instructions)

    def section(self) -> bytes:
        return bytes(self.data) + (b"\0\0\0\0" if self.eh_frame else b"")

    def eh_frame_hdr(self, hdr_svma: int) -> bytes:
        """A version 1 header with a datarel sdata4 table, as ld emits it."""
        eh_frame_ptr = self.svma - (hdr_svma + 4)
        encodings = (DW_EH_PE_pcrel_sdata4, 0x03, DW_EH_PE_datarel_sdata4)  # eh_frame_ptr, fde_count (udata4), table
        out = struct.pack("<BBBBiI", 1, *encodings, eh_frame_ptr, len(self.fdes))
        for start, at in sorted(self.fdes):
            out += struct.pack("<ii", start - hdr_svma, self.svma + at - hdr_svma)
        return out

    def cfi_section(self) -> CfiSection:
        return CfiSection(self.section(), self.svma if self.eh_frame else 0, self.eh_frame, "test")

    def table(self, hdr_svma: int | None = None) -> UnwindTable:
        """An unwind table over these entries, indexed through a built .eh_frame_hdr or by a scan."""
        section = self.cfi_section()
        index = None
        if hdr_svma is not None:
            index = parse_eh_frame_hdr(self.eh_frame_hdr(hdr_svma), hdr_svma, self.svma, len(section.data))
        return UnwindTable([CfiSource(section, index if index is not None else section.scan(), "test")])
