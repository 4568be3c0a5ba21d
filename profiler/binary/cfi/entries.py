"""CIE and FDE headers of one ``.eh_frame`` or ``.debug_frame`` section, parsed on demand from bytes.

The two sections share a layout (DWARF 5 section 6.4.1) with differences this module owns
(LSB Core 5.0 section 10.6 "Exception Frames"; https://www.airs.com/blog/archives/460):

====================  =========================================  ==========================================
field                 .eh_frame                                  .debug_frame
====================  =========================================  ==========================================
length                u32, or 0xffffffff + u64 (64-bit DWARF)    same
CIE id                0 (always 4 bytes)                         0xffffffff / 0xffffffffffffffff (4/8 bytes)
FDE's CIE pointer     distance back from the pointer field       section offset of the CIE
initial_location      DW_EH_PE encoding from the 'R' augmentation  an address of address_size bytes
end of section        an entry of length 0 ("ZERO terminator")   the end of the section
====================  =========================================  ==========================================

Why not pyelftools: ``CallFrameInfo._parse_entry_at`` costs 150-290 us per FDE here (construct parses
field by field), asserts (``AssertionError``) on unknown augmentations and pointer encodings, and parses
the CIE of every FDE again through a stream; this parser costs a few us and raises only ``BinaryError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profiler.binary.cfi.encoding import ByteReader, DW_EH_PE_absptr, DW_EH_PE_omit, PointerBases
from profiler.errors import BinaryError

#: DWARF 5 section 7.2.2: an initial length of 0xffffffff announces the 64-bit DWARF format
DWARF64_ESCAPE = 0xFFFFFFFF
#: DWARF 5 section 7.24: the CIE id of .debug_frame in the 32- and 64-bit formats
DEBUG_FRAME_CIE_ID_32 = 0xFFFFFFFF
DEBUG_FRAME_CIE_ID_64 = 0xFFFFFFFFFFFFFFFF
#: CIE versions in use: 1 (.eh_frame, DWARF 2), 3 (DWARF 3), 4 (DWARF 4/5 .debug_frame)
SUPPORTED_CIE_VERSIONS = (1, 3, 4)


@dataclass(frozen=True, slots=True)
class CIE:
    """A Common Information Entry: what every FDE that points at it shares."""

    offset: int
    version: int
    augmentation: bytes
    code_alignment_factor: int
    data_alignment_factor: int
    return_address_register: int
    fde_encoding: int  #: 'R' augmentation: how initial_location is encoded (.eh_frame)
    has_augmentation_data: bool  #: 'z' augmentation: FDEs carry a length-prefixed augmentation block
    is_signal_frame: bool  #: 'S' augmentation: the FDEs describe signal trampolines (glibc __restore_rt)
    address_size: int
    segment_selector_size: int
    initial_instructions: bytes


@dataclass(frozen=True, slots=True)
class FDE:
    """A Frame Description Entry: the CFA program of one address range ``[initial_location, end)``."""

    offset: int
    cie: CIE
    initial_location: int
    address_range: int
    instructions: bytes
    instructions_svma: int  #: where the instructions lie: the base of a pcrel DW_CFA_set_loc operand

    @property
    def end(self) -> int:
        return self.initial_location + self.address_range


class CfiSection:
    """One CFI section's bytes, with CIEs parsed once and FDEs parsed by offset."""

    def __init__(self, data: bytes, svma: int, is_eh_frame: bool, name: str, address_size: int = 8) -> None:
        self.data = data
        self.svma = svma
        self.is_eh_frame = is_eh_frame
        self.name = name
        self.address_size = address_size
        self._bases = PointerBases(svma)
        self._cies: dict[int, CIE] = {}

    def _entry(self, offset: int) -> tuple[ByteReader, int, int]:
        """(reader positioned after the id field, id value, offset of the id field) of the entry at offset."""
        if offset < 0 or offset + 4 > len(self.data):
            raise BinaryError(f"{self.name}: entry offset {offset:#x} is outside the section")
        r = ByteReader(self.data, offset, what=self.name)
        length = r.u32()
        is_64 = length == DWARF64_ESCAPE
        if is_64:
            length = r.u64()
        if length == 0:
            raise BinaryError(f"{self.name}: zero-length entry at {offset:#x}")
        end = r.pos + length
        if end > len(self.data):
            raise BinaryError(f"{self.name}: entry at {offset:#x} runs past the end of the section")
        r.end = end
        id_pos = r.pos
        cie_id = r.u64() if is_64 and not self.is_eh_frame else r.u32()
        return r, cie_id, id_pos

    def _is_cie_id(self, cie_id: int, r: ByteReader, id_pos: int) -> bool:
        if self.is_eh_frame:
            return cie_id == 0
        return cie_id == (DEBUG_FRAME_CIE_ID_64 if r.pos - id_pos == 8 else DEBUG_FRAME_CIE_ID_32)

    def cie_at(self, offset: int) -> CIE:
        cie = self._cies.get(offset)
        if cie is None:
            r, cie_id, id_pos = self._entry(offset)
            if not self._is_cie_id(cie_id, r, id_pos):
                raise BinaryError(f"{self.name}: the entry at {offset:#x} is not a CIE")
            cie = self._parse_cie(offset, r)
            self._cies[offset] = cie
        return cie

    def _parse_cie(self, offset: int, r: ByteReader) -> CIE:
        version = r.u8()
        if version not in SUPPORTED_CIE_VERSIONS:
            raise BinaryError(f"{self.name}: CIE at {offset:#x} has unsupported version {version}")
        augmentation = r.cstring()
        address_size, segment_size = self.address_size, 0
        if version >= 4:
            address_size, segment_size = r.u8(), r.u8()
        if b"eh" in augmentation:
            r.bytes(address_size)  # GCC 2.x "eh" augmentation: a pointer to exception data
        code_align = r.uleb128()
        data_align = r.sleb128()
        ra_register = r.u8() if version == 1 else r.uleb128()
        fde_encoding, signal = DW_EH_PE_absptr, False
        has_z = augmentation.startswith(b"z")
        if has_z:
            aug_len = r.uleb128()
            aug = ByteReader(self.data, r.pos, r.pos + aug_len, what=self.name)
            r.bytes(aug_len)
            fde_encoding, signal = self._parse_augmentation_data(augmentation, aug, offset)
        elif augmentation not in (b"", b"eh"):
            raise BinaryError(f"{self.name}: CIE at {offset:#x} has unknown augmentation {augmentation!r}")
        if address_size not in (4, 8):
            raise BinaryError(f"{self.name}: CIE at {offset:#x} has address size {address_size}")
        return CIE(
            offset, version, augmentation, code_align, data_align, ra_register, fde_encoding, has_z, signal,
            address_size, segment_size, bytes(self.data[r.pos : r.end]),
        )  # fmt: skip

    def _parse_augmentation_data(self, augmentation: bytes, aug: ByteReader, offset: int) -> tuple[int, bool]:
        """The 'z' augmentation block: L (LSDA encoding), P (personality), R (FDE encoding), S (signal frame).

        Unknown letters end the parse; the 'z' length lets the rest be skipped (LSB 10.6.1.1)."""
        fde_encoding, signal = DW_EH_PE_absptr, False
        for letter in augmentation[1:].decode("latin-1"):
            if letter == "L":
                aug.u8()
            elif letter == "P":
                encoding = aug.u8()
                if encoding != DW_EH_PE_omit:
                    aug.skip_pointer(encoding)  # the personality routine: exception handling only
            elif letter == "R":
                fde_encoding = aug.u8()
            elif letter == "S":
                signal = True
            elif letter not in "BG":  # AArch64 BTI / MTE markers carry no data
                break
        if fde_encoding == DW_EH_PE_omit:
            raise BinaryError(f"{self.name}: CIE at {offset:#x} omits the FDE address encoding")
        return fde_encoding, signal

    def fde_at(self, offset: int) -> FDE:
        r, cie_id, id_pos = self._entry(offset)
        if self._is_cie_id(cie_id, r, id_pos):
            raise BinaryError(f"{self.name}: the entry at {offset:#x} is a CIE, not an FDE")
        cie = self.cie_at(id_pos - cie_id if self.is_eh_frame else cie_id)
        start, size = self._read_range(r, cie)
        if cie.has_augmentation_data:
            r.bytes(r.uleb128())  # the LSDA pointer: exception handling only
        return FDE(offset, cie, start, size, bytes(self.data[r.pos : r.end]), self.svma + r.pos)

    def _read_range(self, r: ByteReader, cie: CIE) -> tuple[int, int]:
        if self.is_eh_frame:
            start = r.pointer(cie.fde_encoding, self._bases)
            size = r.pointer(cie.fde_encoding & 0x0F, self._bases)  # a length: the value format only
            return start, size
        r.bytes(cie.segment_selector_size)
        return r.address(cie.address_size), r.address(cie.address_size)

    def scan(self) -> FdeIndex:
        """Every FDE's range, by walking the section entry by entry: for sections without .eh_frame_hdr.

        The walk is bounded: each step advances by an entry's length (at least 4 bytes).
        """
        starts: list[int] = []
        offsets: list[int] = []
        offset, size = 0, len(self.data)
        while offset + 4 <= size:
            if self.is_eh_frame and self.data[offset : offset + 4] == b"\0\0\0\0":
                break  # ZERO terminator
            r, cie_id, id_pos = self._entry(offset)
            if not self._is_cie_id(cie_id, r, id_pos):
                try:
                    cie = self.cie_at(id_pos - cie_id if self.is_eh_frame else cie_id)
                    start, length = self._read_range(r, cie)
                except BinaryError:
                    start = length = 0  # an FDE we cannot read: left out, the rest stays usable
                if length and start:  # start 0: an FDE of a section the linker discarded
                    starts.append(start)
                    offsets.append(offset)
            offset = r.end
        return FdeIndex.from_lists(starts, offsets)


@dataclass(frozen=True)
class FdeIndex:
    """FDEs sorted by initial_location: the binary-search table a pc is looked up in.

    Only starts are kept (``.eh_frame_hdr`` has no lengths): the FDE itself says where it ends.
    """

    starts: npt.NDArray[np.uint64]
    offsets: npt.NDArray[np.int64]

    @classmethod
    def from_lists(cls, starts: list[int], offsets: list[int]) -> FdeIndex:
        s = np.array(starts, dtype=np.uint64)
        order = np.argsort(s, kind="stable")
        return cls(s[order], np.array(offsets, dtype=np.int64)[order])

    def __len__(self) -> int:
        return len(self.starts)

    def find(self, svma: int) -> int:
        """Index of the last FDE starting at or below ``svma``, or -1."""
        if svma < 0 or svma >> 64:
            return -1
        return int(self.starts.searchsorted(np.uint64(svma), side="right")) - 1
