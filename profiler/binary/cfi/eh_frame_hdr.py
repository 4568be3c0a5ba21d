"""``.eh_frame_hdr``: the sorted table of (initial_location, FDE address) that the runtime unwinder
binary-searches (LSB Core 5.0 section 10.6.2, "The .eh_frame_hdr section").

Layout::

    u8   version            (1)
    u8   eh_frame_ptr_enc   DW_EH_PE encoding of eh_frame_ptr
    u8   fde_count_enc      DW_EH_PE encoding of fde_count (DW_EH_PE_omit: no table)
    u8   table_enc          DW_EH_PE encoding of the table entries (DW_EH_PE_omit: no table)
    ...  eh_frame_ptr       the address of .eh_frame
    ...  fde_count
    ...  table              fde_count pairs (initial_location, FDE address), sorted by initial_location

The table is read with one ``np.frombuffer`` rather than entry by entry: linkers emit fixed-size
``DW_EH_PE_datarel | DW_EH_PE_sdata4`` (relative to the start of .eh_frame_hdr), so 5749 entries of
libpython3.12 become the two uint64 search columns of an ``FdeIndex`` in a few microseconds.
"""

from __future__ import annotations

import numpy as np

from profiler.binary.cfi.encoding import (
    ByteReader,
    DW_EH_PE_absptr,
    DW_EH_PE_datarel,
    DW_EH_PE_omit,
    DW_EH_PE_pcrel,
    PointerBases,
    encoded_size,
)
from profiler.binary.cfi.entries import FdeIndex
from profiler.errors import BinaryError

EH_FRAME_HDR_VERSION = 1

#: numpy dtypes of the fixed-size DW_EH_PE value formats a table can use (low nibble of table_enc)
_TABLE_DTYPES = {0x00: "<u8", 0x02: "<u2", 0x03: "<u4", 0x04: "<u8", 0x0A: "<i2", 0x0B: "<i4", 0x0C: "<i8"}


def parse_eh_frame_hdr(data: bytes, hdr_svma: int, eh_frame_svma: int, eh_frame_size: int) -> FdeIndex | None:
    """The FDE search table as svma starts and offsets into ``.eh_frame``; None if the header has no
    table (the caller then scans .eh_frame itself). A corrupt header raises ``BinaryError``."""
    r = ByteReader(data, what=".eh_frame_hdr")
    version = r.u8()
    if version != EH_FRAME_HDR_VERSION:
        raise BinaryError(f".eh_frame_hdr: unsupported version {version}")
    ptr_enc, count_enc, table_enc = r.u8(), r.u8(), r.u8()
    bases = PointerBases(hdr_svma, data=hdr_svma)
    eh_frame_ptr = r.pointer(ptr_enc, bases)
    if eh_frame_ptr != eh_frame_svma:
        raise BinaryError(
            f".eh_frame_hdr: points at {eh_frame_ptr:#x}, but .eh_frame is at {eh_frame_svma:#x}"
        )
    if count_enc == DW_EH_PE_omit or table_enc == DW_EH_PE_omit:
        return None
    count = r.pointer(count_enc, bases)
    size = encoded_size(table_enc)
    dtype = _TABLE_DTYPES.get(table_enc & 0x0F)
    application = table_enc & 0x70
    if size is None or dtype is None or application not in (DW_EH_PE_absptr, DW_EH_PE_datarel, DW_EH_PE_pcrel):
        return None  # not binary-searchable as stored: scan .eh_frame instead
    if count > (len(data) - r.pos) // (2 * size):
        raise BinaryError(f".eh_frame_hdr: {count} table entries do not fit in {len(data)} bytes")
    raw = np.frombuffer(data, dtype=dtype, count=2 * count, offset=r.pos).astype(np.int64)
    starts, fdes = raw[0::2], raw[1::2]
    if application == DW_EH_PE_datarel:
        starts = starts + hdr_svma
        fdes = fdes + hdr_svma
    elif application == DW_EH_PE_pcrel:
        field = hdr_svma + r.pos + np.arange(count, dtype=np.int64) * (2 * size)
        starts, fdes = starts + field, fdes + field + size
    offsets = fdes - eh_frame_svma
    if count and (offsets.min() < 0 or offsets.max() >= eh_frame_size or starts.min() < 0):
        raise BinaryError(".eh_frame_hdr: a table entry points outside .eh_frame")
    ustarts = starts.astype(np.uint64)
    if count > 1 and not bool(np.all(ustarts[1:] >= ustarts[:-1])):
        order = np.argsort(ustarts, kind="stable")  # the runtime would fail its binary search; we sort
        ustarts, offsets = ustarts[order], offsets[order]
    return FdeIndex(ustarts, offsets)
