"""The debug sections of one ELF file that names, lines and address ranges are read from, as bytes.

Only these sections are loaded (``.debug_loclists`` alone is 4 MiB in libpython3.12 and is never needed
here), once per file, through ``ElfFile.section_bytes``, which inflates the ``SHF_COMPRESSED`` sections of
Debian's ``/usr/lib/debug`` files with their stated size as the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.binary.elf import ElfFile
from profiler.errors import BinaryError


@dataclass(frozen=True)
class DebugSections:
    """The DWARF 5 sections (DWARF 5, section 7 and appendix B) the resolver reads; None when absent."""

    info: bytes
    abbrev: bytes
    aranges: bytes | None = None
    line: bytes | None = None
    strings: bytes | None = None  #: .debug_str
    line_strings: bytes | None = None  #: .debug_line_str
    string_offsets: bytes | None = None  #: .debug_str_offsets
    addr: bytes | None = None
    ranges: bytes | None = None  #: DWARF 2-4 range lists
    rnglists: bytes | None = None  #: DWARF 5 range lists


_OPTIONAL = {
    "aranges": ".debug_aranges", "line": ".debug_line", "strings": ".debug_str",
    "line_strings": ".debug_line_str", "string_offsets": ".debug_str_offsets", "addr": ".debug_addr",
    "ranges": ".debug_ranges", "rnglists": ".debug_rnglists",
}  # fmt: skip


def has_debug_info(elf: ElfFile) -> bool:
    """Whether ``elf`` has the two sections without which there are no DIEs to read."""
    return ".debug_info" in elf.sections and ".debug_abbrev" in elf.sections


def load_sections(elf: ElfFile) -> DebugSections:
    """The debug sections of ``elf`` (BinaryError if .debug_info/.debug_abbrev are missing or unreadable)."""
    info, abbrev = elf.section_bytes(".debug_info"), elf.section_bytes(".debug_abbrev")
    if info is None or abbrev is None:
        raise BinaryError(f"{elf.path}: no .debug_info/.debug_abbrev")
    optional = {field: elf.section_bytes(name) for field, name in _OPTIONAL.items()}
    return DebugSections(info, abbrev, **optional)
