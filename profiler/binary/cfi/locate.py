"""Find the CFI of an ELF file: ``.eh_frame`` (searched through ``.eh_frame_hdr``) and ``.debug_frame``.

Order matters: ``.eh_frame`` is what the runtime unwinder uses, so it is asked first; ``.debug_frame``
covers code the compiler described only for debuggers (``-fno-asynchronous-unwind-tables``, some
assembly). A separate debug file is searched the same way (its ``.eh_frame`` is NOBITS, so only its
``.debug_frame`` is found); ``ObjectFile`` asks it only for pcs the file's own CFI does not cover.
Debug files hold their sections compressed (``SHF_COMPRESSED``): ``ElfFile.section_bytes`` inflates them.
"""

from __future__ import annotations

from collections.abc import Callable

from profiler.binary.cfi.eh_frame_hdr import parse_eh_frame_hdr
from profiler.binary.cfi.entries import CfiSection
from profiler.binary.cfi.table import CfiSource
from profiler.binary.elf import ElfFile
from profiler.errors import BinaryError


def find_cfi_sources(elf: ElfFile) -> tuple[list[CfiSource], list[str]]:
    """The CFI sources of ``elf`` in lookup order, and why any candidate was left out."""
    sources: list[CfiSource] = []
    notes: list[str] = []
    for build in (lambda: eh_frame_source(elf, notes), lambda: debug_frame_source(elf)):
        _collect(build, sources, notes)
    return sources, notes


def _collect(build: Callable[[], CfiSource | None], sources: list[CfiSource], notes: list[str]) -> None:
    try:
        source = build()
    except BinaryError as e:
        notes.append(str(e))
        return
    if source is not None:
        sources.append(source)


def eh_frame_source(elf: ElfFile, notes: list[str]) -> CfiSource | None:
    """``.eh_frame`` with the search table of ``.eh_frame_hdr``; left to be scanned entry by entry when
    the header is missing, has no table, or is corrupt (then noted), as libgcc's unwinder also does."""
    info = elf.sections.get(".eh_frame")
    view = elf.section_data(".eh_frame")
    if info is None or view is None or info.sh_size == 0:
        return None
    section = CfiSection(bytes(view), info.sh_addr, True, f"{elf.path}: .eh_frame", _address_size(elf))
    hdr_info = elf.sections.get(".eh_frame_hdr")
    hdr_view = elf.section_data(".eh_frame_hdr")
    index = None
    if hdr_info is not None and hdr_view is not None:
        try:
            index = parse_eh_frame_hdr(bytes(hdr_view), hdr_info.sh_addr, info.sh_addr, info.sh_size)
        except BinaryError as e:
            notes.append(f"{elf.path}: {e}; scanning .eh_frame instead")
    return CfiSource(section, index, f"{elf.path}:.eh_frame")


def debug_frame_source(elf: ElfFile) -> CfiSource | None:
    """``.debug_frame``; no search table exists for it, so its FDE headers are scanned before use."""
    data = elf.section_bytes(".debug_frame")
    if not data:
        return None
    section = CfiSection(data, 0, False, f"{elf.path}: .debug_frame", _address_size(elf))
    return CfiSource(section, None, f"{elf.path}:.debug_frame")


def _address_size(elf: ElfFile) -> int:
    return 8 if elf.elfclass == 64 else 4
