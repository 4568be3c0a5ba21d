"""A bounds-checked cursor over DWARF bytes, and the LEB128 decoders every DWARF structure uses.

Every read checks the cursor's end (a unit's or a section's), so a corrupt length can only produce a
BinaryError, never a read of a neighbouring unit's bytes or an IndexError. The hot loops (DIE attributes,
line programs) call ``read_uleb``/``read_sleb`` directly instead of going through a cursor method.
"""

from __future__ import annotations

from profiler.errors import BinaryError

#: a LEB128 number longer than this many bytes is corrupt (a 64-bit value needs 10; producers pad a few)
MAX_LEB128_BYTES = 16
#: the initial length escape of the 64-bit DWARF format (DWARF 5, section 7.4)
DWARF64_ESCAPE = 0xFFFFFFFF
#: initial length values 0xfffffff0-0xfffffffe are reserved (DWARF 5, section 7.2.2)
RESERVED_LENGTHS = 0xFFFFFFF0


def read_uleb(data: bytes, i: int, end: int) -> tuple[int, int]:
    """An unsigned LEB128 number at ``i`` (DWARF 5, section 7.6); returns (value, next offset)."""
    if i < end and data[i] < 0x80:  # one byte: most numbers in DIEs and line programs
        return data[i], i + 1
    value = shift = 0
    limit = min(end, i + MAX_LEB128_BYTES)
    while i < limit:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
    raise BinaryError(f"LEB128 number at 0x{i:x} is unterminated")


def read_sleb(data: bytes, i: int, end: int) -> tuple[int, int]:
    """A signed LEB128 number (DWARF 5, section 7.6): sign-extended from the last byte's bit 6."""
    start = i
    value, i = read_uleb(data, i, end)
    if data[i - 1] & 0x40:
        value -= 1 << (7 * (i - start))
    return value, i


class Cursor:
    """Reads little-endian DWARF values from ``data[pos:end]``, raising BinaryError past ``end``."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else min(end, len(data))

    def need(self, size: int) -> None:
        if size < 0 or self.pos + size > self.end:
            raise BinaryError(f"DWARF data truncated at 0x{self.pos:x} (needs {size} bytes)")

    def uint(self, size: int) -> int:
        self.need(size)
        value = int.from_bytes(self.data[self.pos : self.pos + size], "little")
        self.pos += size
        return value

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def s8(self) -> int:
        value = self.uint(1)
        return value - 256 if value >= 128 else value

    def uleb(self) -> int:
        value, self.pos = read_uleb(self.data, self.pos, self.end)
        return value

    def sleb(self) -> int:
        value, self.pos = read_sleb(self.data, self.pos, self.end)
        return value

    def skip(self, size: int) -> None:
        self.need(size)
        self.pos += size

    def cstr(self) -> bytes:
        """A NUL-terminated string (DW_FORM_string and the DWARF 2-4 line header tables)."""
        nul = self.data.find(b"\0", self.pos, self.end)
        if nul < 0:
            raise BinaryError(f"unterminated string at 0x{self.pos:x}")
        text = self.data[self.pos : nul]
        self.pos = nul + 1
        return text

    def initial_length(self) -> tuple[int, int]:
        """A unit's initial length field (DWARF 5, section 7.4): (length, offset size 4 or 8). The unit's
        end (``pos + length`` after this call) is checked against the cursor's end."""
        length, offset_size = self.uint(4), 4
        if length == DWARF64_ESCAPE:
            length, offset_size = self.uint(8), 8
        elif length >= RESERVED_LENGTHS:
            raise BinaryError(f"reserved unit length 0x{length:x} at 0x{self.pos - 4:x}")
        self.need(length)
        return length, offset_size


def c_string(section: bytes | None, offset: int) -> bytes | None:
    """The NUL-terminated string at ``offset`` of a string section (.debug_str, .debug_line_str)."""
    if section is None or not 0 <= offset < len(section):
        return None
    nul = section.find(b"\0", offset)
    return section[offset:nul] if nul >= 0 else None
