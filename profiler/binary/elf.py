"""One ELF file, opened once and queried by section or by stated address (svma). No pid anywhere.

pyelftools parses the headers, one ``Elf_Shdr``/``Elf_Phdr`` struct at a time: its ``iter_sections`` and
``iter_segments`` build an object per section and segment (a ``PT_DYNAMIC`` segment walks every section
again to find its string table), 11.6 ms for libc's headers against 0.8 ms (measured here, best of 5), and
files are opened while a recording runs (each library a target loads). Section and segment bytes are sliced
from an ``mmap`` of the file, so large tables (``.symtab``, ``.eh_frame``) are never copied just to be read
by numpy. A file that fails to parse raises ``BinaryError`` for that module only.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
import zlib
from dataclasses import dataclass

import numpy as np
from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.construct import Container
from elftools.elf.elffile import ELFFile
from elftools.elf.notes import iter_notes

from profiler.errors import BinaryError

PT_LOAD = "PT_LOAD"
PF_X = 1
NT_GNU_BUILD_ID = "NT_GNU_BUILD_ID"
#: ELF gABI, "Section Attribute Flags" and "Compression Header": compressed sections (debug files)
SHF_COMPRESSED = 0x800
SHF_EXECINSTR = 0x4
ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD = 1, 2
_CHDR32 = struct.Struct("<III")  # Elf32_Chdr: ch_type, ch_size, ch_addralign
_CHDR64 = struct.Struct("<IIQQ")  # Elf64_Chdr: ch_type, ch_reserved, ch_size, ch_addralign
#: no real section inflates to more than this; a larger stated size is a corrupt header
MAX_INFLATED_BYTES = 1 << 31


@dataclass(frozen=True)
class LoadSegment:
    """A PT_LOAD program header (ELF gABI, "Program Header")."""

    p_offset: int
    p_vaddr: int
    p_filesz: int
    p_memsz: int
    p_flags: int

    @property
    def executable(self) -> bool:
        return bool(self.p_flags & PF_X)


@dataclass(frozen=True)
class SectionInfo:
    name: str
    sh_type: str
    sh_addr: int
    sh_offset: int
    sh_size: int
    sh_link: int
    sh_entsize: int
    sh_flags: int = 0


class ElfFile:
    """Headers, sections and segments of one ELF image, from a file path or from bytes (the vdso)."""

    def __init__(self, path: str, data: bytes | None = None, display_path: str | None = None) -> None:
        self.path = display_path or path
        #: the path it was opened by in nprof's namespace (``/proc/PID/root/…``); None for bytes (the vdso)
        self.opened_path: str | None = path if data is None else None
        self._file = None
        try:
            if data is None:
                self._file = open(path, "rb")
                size = os.fstat(self._file.fileno()).st_size
                if size == 0:
                    raise BinaryError(f"{self.path}: empty file, not an ELF image")
                self.data: bytes | mmap.mmap = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            else:
                self.data = data
            self._elf = ELFFile(io.BytesIO(self.data) if isinstance(self.data, bytes) else self._file)  # type: ignore[arg-type]
            self.elfclass: int = self._elf.elfclass
            self.sections: dict[str, SectionInfo] = {}
            self._section_names_by_index: list[str] = []
            headers = self._headers("Elf_Shdr", "e_shoff", "e_shentsize", self._elf.num_sections())
            names = headers[self._elf.get_shstrndx()] if headers else None
            for header in headers:
                name = self._section_name(names, header["sh_name"])
                self._section_names_by_index.append(name)
                self.sections.setdefault(
                    name,
                    SectionInfo(
                        name,
                        header["sh_type"],
                        header["sh_addr"],
                        header["sh_offset"],
                        header["sh_size"],
                        header["sh_link"],
                        header["sh_entsize"],
                        header["sh_flags"],
                    ),
                )
            program_headers = self._headers("Elf_Phdr", "e_phoff", "e_phentsize", self._elf.num_segments())
            self.load_segments = [
                LoadSegment(ph["p_offset"], ph["p_vaddr"], ph["p_filesz"], ph["p_memsz"], ph["p_flags"])
                for ph in program_headers
                if ph["p_type"] == PT_LOAD
            ]
            self.build_id = self._read_build_id(program_headers)
        except (ELFError, struct.error, ValueError, OSError, IndexError, KeyError, AssertionError) as e:
            self.close()
            if isinstance(e, FileNotFoundError):
                raise BinaryError(f"{self.path}: file not found") from e
            raise BinaryError(f"{self.path}: not a readable ELF file ({e})") from e

    # --- identity ---------------------------------------------------------------------------------------

    def _headers(self, struct_name: str, offset_field: str, size_field: str, count: int) -> list[Container]:
        """The section (or program) header table: ``count`` entries of ``e_shentsize`` bytes from
        ``e_shoff`` (or ``e_phentsize``, ``e_phoff``), ELF gABI "ELF Header"."""
        elf = self._elf
        if count and elf[offset_field] + count * elf[size_field] > len(self.data):
            raise ValueError(f"{struct_name} table runs past the end of the file")
        layout = getattr(elf.structs, struct_name)
        start, step = elf[offset_field], elf[size_field]
        return [struct_parse(layout, elf.stream, stream_pos=start + i * step) for i in range(count)]

    def _section_name(self, names: Container | None, sh_name: int) -> str:
        """A name from the section header string table (``e_shstrndx``): NUL-terminated at ``sh_name``."""
        if names is None or names["sh_type"] == "SHT_NOBITS" or sh_name >= names["sh_size"]:
            return ""
        start = names["sh_offset"] + sh_name
        end = self.data.find(b"\0", start, names["sh_offset"] + names["sh_size"])
        return bytes(self.data[start : end if end >= 0 else start]).decode("utf-8", "replace")

    def _read_build_id(self, program_headers: list[Container]) -> str | None:
        for ph in program_headers:
            if ph["p_type"] != "PT_NOTE":
                continue
            for note in iter_notes(self._elf, ph["p_offset"], ph["p_filesz"]):
                if note["n_type"] == NT_GNU_BUILD_ID:
                    return str(note["n_desc"])
        return None

    @property
    def debuglink(self) -> tuple[str, int] | None:
        """``.gnu_debuglink``: the separate debug file's name and its CRC32 (GDB manual, "Debugging
        Information in Separate Files")."""
        view = self.section_data(".gnu_debuglink")
        if not view:
            return None
        data = bytes(view)
        name_end = data.find(b"\0")
        if name_end <= 0:
            return None
        crc_at = (name_end + 4) & ~3
        if crc_at + 4 > len(data):
            return None
        (crc,) = struct.unpack_from("<I", data, crc_at)
        return data[:name_end].decode("utf-8", "replace"), crc

    # --- bytes ------------------------------------------------------------------------------------------

    def section_data(self, name: str) -> memoryview | None:
        """The bytes of a section as stored in the file; None if absent or NOBITS."""
        info = self.sections.get(name)
        if info is None or info.sh_type == "SHT_NOBITS":
            return None
        end = info.sh_offset + info.sh_size
        if end > len(self.data):
            raise BinaryError(f"{self.path}: section {name} runs past the end of the file")
        return memoryview(self.data)[info.sh_offset : end]

    def section_ends(self) -> np.ndarray:
        """End address (sh_addr + sh_size) of each section, by section index; 0 for unnamed/absent ones."""
        ends = np.zeros(max(len(self._section_names_by_index), 1), dtype=np.uint64)
        for i, name in enumerate(self._section_names_by_index):
            info = self.sections.get(name)
            if info is not None:
                ends[i] = info.sh_addr + info.sh_size
        return ends

    def executable_sections(self) -> np.ndarray:
        """Whether each section, by section index, holds instructions (``SHF_EXECINSTR``)."""
        flags = np.zeros(max(len(self._section_names_by_index), 1), dtype=bool)
        for i, name in enumerate(self._section_names_by_index):
            info = self.sections.get(name)
            flags[i] = info is not None and bool(info.sh_flags & SHF_EXECINSTR)
        return flags

    def section_bytes(self, name: str) -> bytes | None:
        """A section's contents, inflated if ``SHF_COMPRESSED`` (``objcopy --compress-debug-sections``,
        as in Debian's /usr/lib/debug); None if absent or NOBITS. The stated size bounds the inflation;
        zstd is refused (Python 3.11's standard library has no decoder). Raises BinaryError."""
        info = self.sections.get(name)
        view = self.section_data(name)
        if info is None or view is None:
            return None
        if not info.sh_flags & SHF_COMPRESSED:
            return bytes(view)
        header = _CHDR64 if self.elfclass == 64 else _CHDR32
        if len(view) < header.size:
            raise BinaryError(f"{self.path}: {name}: compressed section shorter than its header")
        fields = header.unpack_from(view)
        ch_type, ch_size = fields[0], fields[-2]
        if ch_type != ELFCOMPRESS_ZLIB:
            kind = "zstd" if ch_type == ELFCOMPRESS_ZSTD else f"type {ch_type}"
            raise BinaryError(f"{self.path}: {name}: {kind} compression is not supported")
        if ch_size == 0:
            return b""  # zlib reads a max_length of 0 as "unlimited": never inflate a section stated empty
        if ch_size > MAX_INFLATED_BYTES:
            raise BinaryError(f"{self.path}: {name}: implausible inflated size {ch_size}")
        try:
            data = zlib.decompressobj().decompress(view[header.size :], ch_size)
        except zlib.error as e:
            raise BinaryError(f"{self.path}: {name}: corrupt zlib stream ({e})") from e
        if len(data) != ch_size:
            raise BinaryError(f"{self.path}: {name}: inflated to {len(data)} bytes, header says {ch_size}")
        return data

    def section_name(self, index: int) -> str | None:
        if 0 <= index < len(self._section_names_by_index):
            return self._section_names_by_index[index]
        return None

    def read_svma(self, svma: int, size: int) -> bytes:
        """Bytes the file places at stated address ``svma`` (empty where the segment has no file bytes)."""
        for seg in self.load_segments:
            if seg.p_vaddr <= svma < seg.p_vaddr + seg.p_filesz:
                start = seg.p_offset + (svma - seg.p_vaddr)
                end = min(start + size, seg.p_offset + seg.p_filesz, len(self.data))
                return bytes(self.data[start:end])
        return b""

    # --- placement --------------------------------------------------------------------------------------

    def bias_for(self, map_start: int, map_offset: int, executable: bool | None = None) -> int | None:
        """Load bias (avma - svma) of a mapping that maps this file from ``map_offset`` at ``map_start``.

        The mapping's file offset falls inside one PT_LOAD segment's file range; file offset ``o`` of that
        segment is stated address ``p_vaddr + (o - p_offset)``. Two segments can share a file page
        (lld and rustc lay out ``R`` then ``R E`` with p_offset != p_vaddr mod the page size), so the
        segment must also match the mapping's permissions: an executable mapping maps the executable
        segment.
        """
        candidates = []
        for seg in self.load_segments:
            page_offset = seg.p_offset & ~0xFFF
            if page_offset <= map_offset < seg.p_offset + max(seg.p_filesz, 1):
                exact = page_offset == map_offset
                same_kind = executable is None or seg.executable == executable
                candidates.append((same_kind, exact, seg))
        if not candidates:
            return None
        candidates.sort(key=lambda c: (not c[0], not c[1]))
        seg = candidates[0][2]
        return map_start - map_offset + seg.p_offset - seg.p_vaddr

    def executable_ranges(self) -> list[tuple[int, int]]:
        """svma ranges of executable PT_LOAD segments."""
        return [(s.p_vaddr, s.p_vaddr + s.p_memsz) for s in self.load_segments if s.executable]

    def close(self) -> None:
        data = getattr(self, "data", None)  # (not set when the file could not be opened)
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:
                pass  # numpy views of the map are still alive; the map closes when they do
        if self._file is not None:
            self._file.close()
            self._file = None
