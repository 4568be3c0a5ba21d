"""A bounds-checked cursor over CFI bytes: fixed-size integers, LEB128 and DW_EH_PE pointer encodings.

Every read is checked against the end of the entry it belongs to, so a truncated or corrupt ``.eh_frame``
raises ``BinaryError`` instead of reading a neighbour's bytes (or raising ``IndexError``/``struct.error``).
LEB128 numbers are limited to ``MAX_LEB128_BYTES`` so a run of 0x80 bytes cannot make a loop run long.
"""

from __future__ import annotations

import builtins
import struct

from profiler.errors import BinaryError

# --- DW_EH_PE_*: pointer encodings of .eh_frame and .eh_frame_hdr -----------------------------------------
# Linux Standard Base Core 5.0, section 10.5.1 "DWARF Exception Header Encoding" (also GCC unwind-pe.h).
# The low nibble is the value format, the high nibble what the value is relative to.
DW_EH_PE_absptr = 0x00
DW_EH_PE_uleb128 = 0x01
DW_EH_PE_udata2 = 0x02
DW_EH_PE_udata4 = 0x03
DW_EH_PE_udata8 = 0x04
DW_EH_PE_sleb128 = 0x09
DW_EH_PE_sdata2 = 0x0A
DW_EH_PE_sdata4 = 0x0B
DW_EH_PE_sdata8 = 0x0C
DW_EH_PE_pcrel = 0x10
DW_EH_PE_textrel = 0x20
DW_EH_PE_datarel = 0x30
DW_EH_PE_funcrel = 0x40
DW_EH_PE_aligned = 0x50
DW_EH_PE_indirect = 0x80
DW_EH_PE_omit = 0xFF

#: a u64 takes at most 10 LEB128 bytes (ceil(64 / 7)); anything longer is corrupt
MAX_LEB128_BYTES = 10

_FIXED = {
    DW_EH_PE_udata2: struct.Struct("<H"),
    DW_EH_PE_udata4: struct.Struct("<I"),
    DW_EH_PE_udata8: struct.Struct("<Q"),
    DW_EH_PE_sdata2: struct.Struct("<h"),
    DW_EH_PE_sdata4: struct.Struct("<i"),
    DW_EH_PE_sdata8: struct.Struct("<q"),
}
_U8, _U16, _U32, _U64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<Q"))
_MASK64 = (1 << 64) - 1


class PointerBases:
    """The addresses DW_EH_PE relative encodings are relative to (gimli's ``BaseAddresses``).

    ``section`` is the svma of byte 0 of the data being read, so a pcrel value at offset ``o`` is relative
    to ``section + o``. ``data`` is the base of DW_EH_PE_datarel (``.eh_frame_hdr`` uses its own start);
    ``text`` and ``func`` are None where the encoding makes no sense and are then rejected as corrupt.
    """

    __slots__ = ("section", "data", "text", "func")

    def __init__(self, section: int, data: int | None = None, text: int | None = None) -> None:
        self.section = section
        self.data = data
        self.text = text
        self.func: int | None = None


class ByteReader:
    """A cursor over ``data[pos:end]``; every read past ``end`` raises ``BinaryError``."""

    __slots__ = ("data", "pos", "end", "what")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None, what: str = "CFI") -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else min(end, len(data))
        self.what = what

    def _take(self, size: int) -> int:
        at = self.pos
        if size < 0 or at + size > self.end:
            raise BinaryError(f"{self.what}: truncated at offset {at:#x} (needs {size} bytes)")
        self.pos = at + size
        return at

    def bytes(self, size: int) -> bytes:
        at = self._take(size)
        return bytes(self.data[at : at + size])

    def u8(self) -> int:
        value: int = _U8.unpack_from(self.data, self._take(1))[0]
        return value

    def u16(self) -> int:
        value: int = _U16.unpack_from(self.data, self._take(2))[0]
        return value

    def u32(self) -> int:
        value: int = _U32.unpack_from(self.data, self._take(4))[0]
        return value

    def u64(self) -> int:
        value: int = _U64.unpack_from(self.data, self._take(8))[0]
        return value

    def uleb128(self) -> int:
        """Unsigned LEB128 (DWARF 5, section 7.6)."""
        data, pos, end = self.data, self.pos, self.end
        result = shift = 0
        for i in range(MAX_LEB128_BYTES):
            if pos + i >= end:
                raise BinaryError(f"{self.what}: truncated LEB128 at offset {pos:#x}")
            byte = data[pos + i]
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                self.pos = pos + i + 1
                return result & _MASK64
        raise BinaryError(f"{self.what}: LEB128 longer than {MAX_LEB128_BYTES} bytes at offset {pos:#x}")

    def sleb128(self) -> int:
        """Signed LEB128 (DWARF 5, section 7.6)."""
        start = self.pos
        value = self.uleb128()
        nbits = 7 * (self.pos - start)
        if nbits < 64 and value & (1 << (nbits - 1)):
            return value - (1 << nbits)
        return value - (1 << 64) if value >> 63 else value

    def cstring(self, limit: int = 256) -> builtins.bytes:
        """A NUL-terminated string of at most ``limit`` bytes (augmentation strings are short)."""
        stop = min(self.end, self.pos + limit)
        nul = self.data.find(b"\0", self.pos, stop)
        if nul < 0:
            raise BinaryError(f"{self.what}: unterminated string at offset {self.pos:#x}")
        text = bytes(self.data[self.pos : nul])
        self.pos = nul + 1
        return text

    def address(self, size: int) -> int:
        """An unencoded target address of ``size`` bytes (.debug_frame's initial_location)."""
        if size == 8:
            return self.u64()
        if size == 4:
            return self.u32()
        raise BinaryError(f"{self.what}: unsupported address size {size}")

    def pointer(self, encoding: int, bases: PointerBases) -> int:
        """A DW_EH_PE-encoded pointer; ``DW_EH_PE_indirect`` is refused (it needs process memory)."""
        if encoding == DW_EH_PE_omit:
            raise BinaryError(f"{self.what}: a required pointer has encoding DW_EH_PE_omit")
        if encoding & DW_EH_PE_indirect:
            raise BinaryError(f"{self.what}: indirect pointer encoding {encoding:#x} cannot be read from a file")
        field_svma = bases.section + self.pos
        application = encoding & 0x70
        if application == DW_EH_PE_aligned:
            self._take((-self.pos) % 8)
            field_svma = bases.section + self.pos
        value = self._value(encoding & 0x0F)
        base = self._base(application, field_svma, bases)
        return (value + base) & _MASK64

    def skip_pointer(self, encoding: int) -> None:
        """Step over an encoded pointer without resolving it (an indirect personality routine's slot)."""
        if encoding & 0x70 == DW_EH_PE_aligned:
            self._take((-self.pos) % 8)
        self._value(encoding & 0x0F)

    def _value(self, form: int) -> int:
        if form == DW_EH_PE_absptr:
            return self.u64()
        if form == DW_EH_PE_uleb128:
            return self.uleb128()
        if form == DW_EH_PE_sleb128:
            return self.sleb128()
        fixed = _FIXED.get(form)
        if fixed is None:
            raise BinaryError(f"{self.what}: unknown DW_EH_PE value format {form:#x}")
        value: int = fixed.unpack_from(self.data, self._take(fixed.size))[0]
        return value

    def _base(self, application: int, field_svma: int, bases: PointerBases) -> int:
        if application in (DW_EH_PE_absptr, DW_EH_PE_aligned):
            return 0
        if application == DW_EH_PE_pcrel:
            return field_svma
        base = {DW_EH_PE_datarel: bases.data, DW_EH_PE_textrel: bases.text, DW_EH_PE_funcrel: bases.func}.get(
            application
        )
        if base is None:
            raise BinaryError(f"{self.what}: pointer encoding {application:#x} has no base here")
        return base


def encoded_size(encoding: int) -> int | None:
    """Bytes of a fixed-size DW_EH_PE value format (None for LEB128 and omit): sizes the hdr table."""
    if encoding == DW_EH_PE_omit:
        return None
    form = encoding & 0x0F
    if form == DW_EH_PE_absptr:
        return 8
    fixed = _FIXED.get(form)
    return fixed.size if fixed is not None else None
