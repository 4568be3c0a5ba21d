"""The line table of one CU (DWARF 5, section 6.2): address -> (file, line), as sorted numpy columns.

pyelftools' decoder builds one Python object per row and state: 0.36 s for the 24,000 rows of
libpython3.12's ceval.c. The state machine below keeps only the four registers a lookup needs (address,
file, line, end_sequence), takes 0.06 s there, and every opcode moves forward in a byte range checked
against the program's end, so a corrupt program cannot loop.

Within a sequence, of several rows for one address the last one wins, as in binutils' addr2line (its
``add_line_info`` keeps the last entry for an address), an end_sequence row included. Rows are then
sorted by address with ``end_sequence`` rows first among equal addresses, so a sequence that starts
where another ends wins.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_reader import read_sleb, read_uleb
from profiler.symbolize.line_header import LineHeader

# Standard opcodes (DWARF 5, section 6.2.5.2 and table 7.25)
DW_LNS_copy, DW_LNS_advance_pc, DW_LNS_advance_line, DW_LNS_set_file = 1, 2, 3, 4
DW_LNS_const_add_pc, DW_LNS_fixed_advance_pc = 8, 9
# Extended opcodes (DWARF 5, section 6.2.5.3 and table 7.26)
DW_LNE_end_sequence, DW_LNE_set_address = 1, 2

#: what ``decode_columns`` makes of a program; bump on any change to it, so that decoded tables stored on
#: disk by another version (``line_cache.py``) are not used
DECODER_VERSION = 1


class LineColumns(NamedTuple):
    """A decoded line program: its rows, sorted for ``searchsorted``."""

    addresses: np.ndarray  #: uint64
    files: np.ndarray  #: int64 file register values
    lines: np.ndarray  #: int64
    ends: np.ndarray  #: bool: the row ends a sequence


class DwarfLineTable:
    """Rows of one line program, sorted for ``searchsorted``; file names resolved once."""

    def __init__(self, header: LineHeader, section: bytes, columns: LineColumns | None = None) -> None:
        """Decode the program of ``header``, unless its ``columns`` were decoded before (``line_cache.py``)."""
        self.file_names = header.file_names
        self.source_root = header.source_root  #: the root of the unit's source tree (``line_header.py``)
        self.columns = columns if columns is not None else decode_columns(header, section)
        self.addresses, self.files, self.lines, self.ends = self.columns

    def __len__(self) -> int:
        return len(self.addresses)

    def lookup(self, svma: int) -> tuple[str | None, int] | None:
        """(file, line) of the row covering ``svma``; None outside every sequence. Line 0 means the
        compiler knew no source line (DWARF 5, section 6.2.2)."""
        i = int(np.searchsorted(self.addresses, np.uint64(svma), side="right")) - 1
        if i < 0 or self.ends[i]:
            return None
        return self.file_name(int(self.files[i])), int(self.lines[i])

    def file_name(self, index: int) -> str | None:
        """A file register value, or a DW_AT_call_file / DW_AT_decl_file, as a path."""
        return self.file_names.get(index)


def decode_columns(header: LineHeader, section: bytes) -> LineColumns:
    """Run the program and sort its rows (module docstring). Raises BinaryError if it is corrupt."""
    rows = _decode(header, section)
    try:
        addresses = np.array(rows[0::4], dtype=np.uint64)
        files = np.array(rows[1::4], dtype=np.int64)
        lines = np.array(rows[2::4], dtype=np.int64)
    except OverflowError as e:  # a register advanced past 64 bits: corrupt operands
        raise BinaryError(f"line program at 0x{header.program_start:x}: register overflow") from e
    ends = np.array(rows[3::4], dtype=bool)
    # within a sequence the last row for an address wins: drop a row the next one (same address, same
    # sequence: this row is no end_sequence) supersedes
    keep = np.ones(len(addresses), dtype=bool)
    keep[:-1] = (addresses[:-1] != addresses[1:]) | ends[:-1]
    addresses, files, lines, ends = addresses[keep], files[keep], lines[keep], ends[keep]
    order = np.lexsort((~ends, addresses))  # stable: equal keys keep program order
    return LineColumns(addresses[order], files[order], lines[order], ends[order])


def _decode(header: LineHeader, section: bytes) -> list[int]:
    """Run the line-number state machine; returns flat (address, file, line, end_sequence) rows.

    ``maximum_operations_per_instruction`` is taken as 1 (op_index is for VLIW targets; x86 has none).
    """
    min_inst, line_base, line_range = header.minimum_instruction_length, header.line_base, header.line_range
    opcode_base, lengths = header.opcode_base, header.standard_opcode_lengths
    start, end = header.program_start, header.program_end
    if line_range <= 0 or opcode_base <= 0 or not 0 <= start <= end <= len(section):
        raise BinaryError(f"line program at 0x{start:x}: invalid header")
    data = section
    const_add = min_inst * ((255 - opcode_base) // line_range)
    # special opcodes (section 6.2.5.1): each advances address and line by amounts fixed by the header
    address_advance = [min_inst * ((op - opcode_base) // line_range) for op in range(256)]
    line_advance = [line_base + (op - opcode_base) % line_range for op in range(256)]
    rows: list[int] = []  # each opcode byte adds at most one row: the size is bounded by the section's
    address, file, line = 0, 1, 1
    i = start
    while i < end:
        op = data[i]
        i += 1
        if op >= opcode_base:
            address += address_advance[op]
            line += line_advance[op]
            rows += (address, file, line, 0)
        elif op == 0:  # extended opcode: ULEB128 length, then the sub-opcode and its operands
            length, i = read_uleb(data, i, end)
            next_i = i + length
            if length == 0 or next_i > end:
                raise BinaryError(f"line program: extended opcode at 0x{i:x} runs past its end")
            sub = data[i]
            if sub == DW_LNE_end_sequence:
                rows += (address, file, line, 1)
                address, file, line = 0, 1, 1
            elif sub == DW_LNE_set_address:
                address = int.from_bytes(data[i + 1 : next_i], "little")
            i = next_i
        elif op == DW_LNS_copy:
            rows += (address, file, line, 0)
        elif op == DW_LNS_advance_pc:
            delta, i = read_uleb(data, i, end)
            address += min_inst * delta
        elif op == DW_LNS_advance_line:
            if i < end and data[i] < 0x80:  # one-byte SLEB128: bit 6 is the sign
                line += data[i] - ((data[i] & 0x40) << 1)
                i += 1
            else:
                delta, i = read_sleb(data, i, end)
                line += delta
        elif op == DW_LNS_set_file:
            file, i = read_uleb(data, i, end)
        elif op == DW_LNS_const_add_pc:
            address += const_add
        elif op == DW_LNS_fixed_advance_pc:
            if i + 2 > end:
                break
            address += data[i] | data[i + 1] << 8
            i += 2
        else:  # other standard opcodes (set_column, negate_stmt...): skip their ULEB128 operands
            for _ in range(lengths[op - 1] if op - 1 < len(lengths) else 0):
                if i < end and data[i] < 0x80:
                    i += 1
                else:
                    _, i = read_uleb(data, i, end)
    return rows

