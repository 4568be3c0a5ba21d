"""Build the unwind table of a file, or restore it from the disk cache.

What the cache holds, and why (``benchmarks/bench_cfi.py``, libpython3.12 + libc on this machine):

* An index read from ``.eh_frame_hdr`` is ready in 0.6 ms for both libraries, less than opening a
  cache entry, so such a table is not stored when it is built.
* Sections without a search table (``.debug_frame``, ``.eh_frame`` without a header) need a scan of
  every entry (18-25 ms for libc/libpython-sized sections): their index is stored as soon as it is
  built.
* ``save_unwind_table`` (at the end of a recording) stores the FDEs decoded so far. The next attach
  restores them in 7-14 ms, and its first 300 lookups per library then cost 11-16 ms instead of the
  44-85 ms of decoding them again: whole tables are never decoded up front, which would cost
  350-530 ms for these two libraries.
"""

from __future__ import annotations

from profiler.binary.cache import TableCache
from profiler.binary.cfi.locate import find_cfi_sources
from profiler.binary.cfi.snapshot import table_from_arrays, table_to_arrays
from profiler.binary.cfi.table import CfiSource, UnwindTable
from profiler.binary.elf import ElfFile
from profiler.errors import BinaryError

#: the note of a file that simply has no CFI: not a problem to warn about (frame pointers are used)
NO_CFI = "no .eh_frame or .debug_frame"


def load_unwind_table(
    elf: ElfFile, cache: TableCache | None, key: str | None
) -> tuple[UnwindTable | None, list[str]]:
    """The table of ``elf`` (None if it has no usable CFI) and notes on what was left out and why."""
    sources, notes = find_cfi_sources(elf)
    if not sources:
        notes.append(f"{elf.path}: {NO_CFI}")
        return None, notes
    if cache is not None and key is not None:
        arrays = cache.load(key)
        if arrays is not None:
            try:
                return table_from_arrays(sources, arrays), notes
            except BinaryError as e:
                cache.discard(key)
                notes.append(f"discarded the cached unwind table: {e}")
    needed_scan = any(source.index is None for source in sources)
    usable = _indexed(sources, notes)
    if not usable:
        return None, notes
    table = UnwindTable(usable)
    if needed_scan and cache is not None and key is not None:
        cache.store(key, table_to_arrays(table))
    return table, notes


def save_unwind_table(table: UnwindTable, cache: TableCache, key: str) -> bool:
    """Store the table if it decoded FDEs since it was built or loaded; True if written."""
    if not table.grown or not cache.store(key, table_to_arrays(table)):
        return False
    table.mark_saved()
    return True


def _indexed(sources: list[CfiSource], notes: list[str]) -> list[CfiSource]:
    """The sources whose FDE index could be built (a section whose entries do not chain is dropped)."""
    usable = []
    for source in sources:
        try:
            _ = source.fde_index  # built now, where a corrupt one is told
        except BinaryError as e:
            notes.append(f"{source.origin}: unusable ({e})")
            continue
        usable.append(source)
    return usable
