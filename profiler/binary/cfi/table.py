"""The unwind table of one module: FDEs found by binary search, decoded only when a pc needs them.

A lookup (``rule_for(svma)``) goes:

1. the per-pc memo, a dict (15 ns a hit; DESIGN.md section 2);
2. on a miss, for each source in order (``.eh_frame``, then ``.debug_frame``): ``searchsorted`` over
   the source's FDE starts (``np.uint64`` key: a Python int would promote the table to float64 on
   every call);
3. the FDE is decoded and its rows compiled into the module's ``RowColumns`` the first time any pc in
   it is looked up; a second ``searchsorted`` over the FDE's row starts picks the row.

Why lazy (measured by ``benchmarks/bench_cfi.py``): decoding and compiling one FDE costs 30-60 us, so a
whole libpython3.12 (5747 FDEs) costs 240-370 ms and libc 110-160 ms, while 300 distinct pcs per
library, a busy profile's worth, touch about 240 FDEs each. ``compile_all`` decodes everything
(benchmarks, tools).

A corrupt FDE gives "no row" for its range and is counted in ``stats.bad_fdes``; it never raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from profiler.binary.cfi.columns import RowColumns
from profiler.binary.cfi.entries import CfiSection, FdeIndex
from profiler.binary.cfi.program import decode_fde, initial_state
from profiler.binary.cfi.rules import CfaRule, RegisterRule, Row, UnwindRule, compile_rule
from profiler.errors import BinaryError

#: per-pc memo entries kept before the memo is cleared (a bound on memory, not a cache policy)
MAX_MEMO = 1 << 20

#: per-FDE slot of an FDE that failed to decode (no rows)
_BAD = (0, 0, 0)

Slot = tuple[int, int, int]


@dataclass
class CfiSource:
    """One CFI section and its FDE search index; ``origin`` names it in messages ("libc.so.6:.eh_frame").

    ``index`` is None until built: sections without ``.eh_frame_hdr`` are scanned (or the index is
    taken from the disk cache) before a table is made of them.
    """

    section: CfiSection
    index: FdeIndex | None
    origin: str

    @property
    def fde_index(self) -> FdeIndex:
        if self.index is None:
            self.index = self.section.scan()
        return self.index


@dataclass
class TableStats:
    memo_hits: int = 0
    memo_misses: int = 0
    decoded_fdes: int = 0
    bad_fdes: int = 0
    errors: list[str] = field(default_factory=list)  #: the first few decoding errors, for diagnosis


class UnwindTable:
    """Compiled CFI rows of one module, keyed by svma."""

    def __init__(
        self, sources: list[CfiSource], columns: RowColumns | None = None, slots: list[np.ndarray] | None = None
    ) -> None:
        self.sources = sources
        self.columns = columns or RowColumns()
        self.stats = TableStats()
        self._memo: dict[int, UnwindRule | None] = {}
        self._rules: dict[int, UnwindRule] = {}  #: row index -> its compiled rule
        # per source, an (FDEs, 3) int64 array: per FDE (row lo, row hi, FDE end svma) once decoded, -1s before.
        # Arrays, not a tuple per FDE: libtorch_cpu.so has ~10^6 FDEs, and making their tuples from a cached
        # table took 0.5 of the 0.6 s its load took, in the first tick of an attach to a PyTorch program.
        if slots is None:
            slots = [np.full((len(source.fde_index), 3), -1, dtype=np.int64) for source in sources]
        self._fdes = slots
        self._decoded_at_load = self.decoded_count
        self._initial: dict[tuple[int, int], tuple[CfaRule, dict[int, RegisterRule]]] = {}

    def __len__(self) -> int:
        return sum(len(s.fde_index) for s in self.sources)

    def rule_for(self, svma: int) -> UnwindRule | None:
        """The compiled rule in force at ``svma``, or None if no FDE covers it."""
        rule = self._memo.get(svma, False)
        if rule is not False:
            self.stats.memo_hits += 1
            return rule  # type: ignore[return-value]
        self.stats.memo_misses += 1
        j = self._row_index(svma)
        rule = None
        if j is not None:
            rule = self._rules.get(j)
            if rule is None:
                rule = self._rules[j] = compile_rule(*self.columns.row(j))  # once per row, shared by its pcs
        if len(self._memo) >= MAX_MEMO:
            self._memo.clear()
        self._memo[svma] = rule
        return rule

    def fde_start(self, svma: int) -> int | None:
        """Where the FDE covering ``svma`` starts, or None if none does (or it is corrupt)."""
        for s, i, _rows in self._covering(svma):
            return int(self.sources[s].fde_index.starts[i])
        return None

    def row_for(self, svma: int) -> tuple[Row, bool] | None:
        """The decoded row at ``svma`` and its signal-frame flag (no memo: for tests and tools)."""
        j = self._row_index(svma)
        return self.columns.row(j) if j is not None else None

    def _row_index(self, svma: int) -> int | None:
        for _s, _i, (lo, hi, _end) in self._covering(svma):
            if lo == hi:
                continue
            starts = self.columns.records["start"][lo:hi]
            j = lo + int(starts.searchsorted(np.uint64(svma), side="right")) - 1
            if j >= lo:
                return j
        return None

    def _covering(self, svma: int) -> Iterator[tuple[int, int, Slot]]:
        """(source, FDE index, its decoded rows' slot) of each source's FDE that covers ``svma``, in the
        sources' order; a corrupt FDE covers nothing (``_BAD`` ends at 0)."""
        for s, source in enumerate(self.sources):
            i = source.fde_index.find(svma)
            if i >= 0:
                rows = self._fde_rows(s, i)
                if svma < rows[2]:
                    yield s, i, rows

    def _fde_rows(self, s: int, i: int) -> Slot:
        lo, hi, end = self._fdes[s][i].tolist()
        if lo >= 0:
            return lo, hi, end
        slot = self._decode(s, i)
        self._fdes[s][i] = slot
        return slot

    def _decode(self, s: int, i: int) -> Slot:
        source = self.sources[s]
        try:
            fde = source.section.fde_at(int(source.fde_index.offsets[i]))
            indexed = int(source.fde_index.starts[i])
            if fde.initial_location != indexed:
                # the search table and the entry disagree: one of them is corrupt, trust neither
                raise BinaryError(
                    f"FDE at 0x{int(source.fde_index.offsets[i]):x} starts at 0x{fde.initial_location:x}, "
                    f"its index entry says 0x{indexed:x}"
                )
            key = (s, fde.cie.offset)
            initial = self._initial.get(key)
            if initial is None:
                initial = self._initial[key] = initial_state(fde.cie)
            rows = decode_fde(fde, initial)
            lo, hi = self.columns.append(rows, fde.cie.is_signal_frame)
        except BinaryError as e:
            self.stats.bad_fdes += 1
            if len(self.stats.errors) < 8:
                self.stats.errors.append(f"{source.origin} FDE #{i}: {e}")
            return _BAD
        self.stats.decoded_fdes += 1
        return lo, hi, fde.end

    def compile_all(self) -> None:
        """Decode every FDE now (the disk cache stores whole tables; benchmarks compare the two ways)."""
        for s, slots in enumerate(self._fdes):
            for i in range(len(slots)):
                self._fde_rows(s, i)

    def slots(self, s: int) -> np.ndarray:
        """Per FDE of source ``s``: (row lo, row hi, end), (-1, -1, -1) if not decoded yet (the table's own
        array: not to be changed)."""
        return self._fdes[s]

    @property
    def decoded_count(self) -> int:
        return sum(int(np.count_nonzero(slots[:, 0] >= 0)) for slots in self._fdes)

    @property
    def grown(self) -> bool:
        """FDEs were decoded since the table was built or loaded: worth saving to the disk cache."""
        return self.decoded_count > self._decoded_at_load

    def mark_saved(self) -> None:
        self._decoded_at_load = self.decoded_count
