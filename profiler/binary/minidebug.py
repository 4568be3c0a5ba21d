"""MiniDebugInfo: the symbol table a stripped file carries compressed in its ``.gnu_debugdata`` section.

Fedora, RHEL and their derivatives strip every packaged binary and library, and keep in ``.gnu_debugdata``
an xz-compressed ELF image whose ``.symtab`` holds the function symbols ``.dynsym`` lacks (static and
hidden functions), so that a backtrace names them without the debug package (GDB manual, "MiniDebugInfo";
elfutils and perf read it too). Other builds do it as well: the ``libgomp.so.1`` bundled in PyTorch's
wheels has one, and a sweep recording a PyTorch training loop showed 46-90% of its samples as
``libgomp.so.1+0x1dfd0`` and such, the OpenMP workers' barrier waits, which the section names
(``gomp_team_barrier_wait_end``). The image keeps the original file's section headers, so its symbols'
section indices are the file's own.
"""

from __future__ import annotations

import lzma

from elftools.common.exceptions import ELFError

from profiler.binary.elf import ElfFile
from profiler.errors import BinaryError

#: the section (GDB manual, "MiniDebugInfo")
SECTION = ".gnu_debugdata"
#: the most bytes the image may decompress to: a symbol table of function names is KiBs to a few MiBs (the
#: libgomp.so.1 of PyTorch 2.13.0: 6 KiB of xz, a 32 KiB image); the bound keeps a corrupt or hostile file
#: from taking nprof's memory
MAX_IMAGE_BYTES = 64 << 20


def mini_debuginfo(elf: ElfFile) -> ElfFile | None:
    """The ELF image in ``elf``'s ``.gnu_debugdata``, or None: absent, not xz, too large, or not ELF."""
    try:
        data = elf.section_data(SECTION)
    except BinaryError:
        return None
    if data is None or not len(data):
        return None
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        image = decompressor.decompress(bytes(data), max_length=MAX_IMAGE_BYTES)
    except lzma.LZMAError:
        return None
    if not decompressor.eof:
        return None  # truncated, or larger than the bound
    try:
        return ElfFile(f"{elf.path}:{SECTION}", data=image)
    except (BinaryError, ELFError, ValueError):
        return None
