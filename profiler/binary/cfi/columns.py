"""Compiled rows as compact numpy columns, with side tables for what does not fit a fixed-width column.

One record per row (DESIGN.md section 2, rule 3)::

    start       u8   svma where the row begins
    kind        u1   UnwindKind: FAST, GENERIC or END (return address undefined)
    signal      u1   the FDE's CIE has the 'S' augmentation
    cfa_kind    u1   CfaKind: REGISTER or EXPRESSION
    cfa_reg     u1   DWARF register of a REGISTER CFA
    cfa_arg     i8   offset of a REGISTER CFA, or an expression id
    rule_kind   u1x7 RuleKind of the return address, rbx, rbp, r12-r15 (TRACKED_REGISTERS order)
    rule_arg    i8x7 offset, register number, or expression id
    extra       i4   id of the rules of any other register (signal frames), -1 for none

Expressions are stored once each (by value) in ``expressions``; rules of untracked registers in
``extras``. Both side tables are lists of bytes / tuples of ints, so a whole table can be saved as
numbers only (``binary/cache.py``; the expressions as one byte blob plus offsets).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profiler.binary.cfi.rules import (
    CFA_EXPRESSION,
    EXPRESSION_KINDS,
    TRACKED_REGISTERS,
    RegisterRule,
    Row,
    classify,
)
from profiler.errors import BinaryError
from profiler.model import NUM_DWARF_REGS

ROW_DTYPE = np.dtype(
    [
        ("start", "<u8"),
        ("kind", "u1"),
        ("signal", "u1"),
        ("cfa_kind", "u1"),
        ("cfa_reg", "u1"),
        ("cfa_arg", "<i8"),
        ("rule_kind", "u1", (len(TRACKED_REGISTERS),)),
        ("rule_arg", "<i8", (len(TRACKED_REGISTERS),)),
        ("extra", "<i4"),
    ]
)
NO_RULE = 0xFF  #: rule_kind of a tracked register the row says nothing about
_TRACKED_INDEX = {reg: i for i, reg in enumerate(TRACKED_REGISTERS)}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int64(value: int) -> int:
    if not _INT64[0] <= value <= _INT64[1]:
        raise BinaryError(f"CFI: offset {value} does not fit in 64 bits")
    return value


class RowColumns:
    """Append-only compiled rows: ``records[:count]`` is valid; capacity doubles as FDEs are added."""

    def __init__(self, capacity: int = 64) -> None:
        self.records: npt.NDArray[np.void] = np.zeros(capacity, dtype=ROW_DTYPE)
        self.count = 0
        self.expressions: list[bytes] = []
        self.extras: list[tuple[tuple[int, int, int], ...]] = []
        self._expr_ids: dict[bytes, int] = {}
        self._extra_ids: dict[tuple[tuple[int, int, int], ...], int] = {}
        self._compiled: dict[object, tuple[object, ...]] = {}

    @classmethod
    def restored(
        cls, records: npt.NDArray[np.void], expressions: list[bytes], extras: list[tuple[tuple[int, int, int], ...]]
    ) -> RowColumns:
        """Columns loaded from the disk cache (already validated), ready for more FDEs to be appended."""
        columns = cls(0)
        columns.records, columns.count = records.copy(), len(records)
        columns.expressions, columns.extras = expressions, extras
        columns._expr_ids = {e: i for i, e in enumerate(expressions)}
        columns._extra_ids = {x: i for i, x in enumerate(extras)}
        return columns

    @property
    def valid(self) -> npt.NDArray[np.void]:
        return self.records[: self.count]

    def append(self, rows: list[Row], signal: bool) -> tuple[int, int]:
        """Compile ``rows`` (one FDE's) to records; returns their [lo, hi) slice."""
        lo, n = self.count, len(rows)
        if lo + n > len(self.records):
            grown = np.zeros(max(2 * len(self.records), lo + n, 64), dtype=ROW_DTYPE)
            grown[:lo] = self.records[:lo]
            self.records = grown
        records = []
        for row in rows:
            # Rows repeat the same rules at many addresses ("CFA rsp+16, rbx at c-16, ra at c-8"): the
            # compiled fields of a rule set are built once per module (measured: libc's whole table
            # compiles in 125 ms instead of 440 ms).
            key = (row.cfa, signal, tuple(row.registers.items()))
            rest = self._compiled.get(key)
            if rest is None:
                rest = self._compiled[key] = self._record(row, signal)
            records.append((row.start, *rest))
        self.records[lo : lo + n] = np.array(records, dtype=ROW_DTYPE)
        self.count = lo + n
        return lo, lo + n

    def _record(self, row: Row, signal: bool) -> tuple[object, ...]:
        """Every field of a row's record but ``start``."""
        cfa_kind, cfa_reg, cfa_arg = row.cfa
        cfa_value = self._intern_expression(cfa_arg) if isinstance(cfa_arg, bytes) else _int64(cfa_arg)
        kinds = [NO_RULE] * len(TRACKED_REGISTERS)
        args = [0] * len(TRACKED_REGISTERS)
        extra: list[tuple[int, int, int]] = []
        others: dict[int, int] = {}
        for reg, (kind, arg) in row.registers.items():
            value = self._intern_expression(arg) if isinstance(arg, bytes) else _int64(arg)
            at = _TRACKED_INDEX.get(reg)
            if at is None:
                if 0 <= reg < NUM_DWARF_REGS:
                    others[reg] = kind
                extra.append((reg, kind, value))
            else:
                kinds[at], args[at] = kind, value
                if at:
                    others[reg] = kind
        ra_kind = kinds[0] if kinds[0] != NO_RULE else None
        kind = classify(cfa_kind, cfa_reg, ra_kind, others, signal)
        extra_id = self._intern_extra(tuple(sorted(extra))) if extra else -1
        return (kind, signal, cfa_kind, min(cfa_reg, 0xFF), cfa_value, kinds, args, extra_id)

    def _intern_expression(self, expr: bytes) -> int:
        eid = self._expr_ids.get(expr)
        if eid is None:
            eid = self._expr_ids[expr] = len(self.expressions)
            self.expressions.append(expr)
        return eid

    def _intern_extra(self, rules: tuple[tuple[int, int, int], ...]) -> int:
        xid = self._extra_ids.get(rules)
        if xid is None:
            xid = self._extra_ids[rules] = len(self.extras)
            self.extras.append(rules)
        return xid

    def row(self, index: int) -> tuple[Row, bool]:
        """Rebuild the decoded row (and its signal flag) from record ``index``."""
        rec = self.records[index]
        cfa_kind = int(rec["cfa_kind"])
        cfa_arg = int(rec["cfa_arg"])
        cfa = (cfa_kind, int(rec["cfa_reg"]), self.expressions[cfa_arg] if cfa_kind == CFA_EXPRESSION else cfa_arg)
        regs: dict[int, RegisterRule] = {}
        for reg, kind, arg in zip(TRACKED_REGISTERS, rec["rule_kind"].tolist(), rec["rule_arg"].tolist()):
            if kind != NO_RULE:
                regs[reg] = (kind, self.expressions[arg] if kind in EXPRESSION_KINDS else arg)
        extra = int(rec["extra"])
        if extra >= 0:
            for reg, kind, arg in self.extras[extra]:
                regs[reg] = (kind, self.expressions[arg] if kind in EXPRESSION_KINDS else arg)
        return Row(int(rec["start"]), cfa, regs), bool(rec["signal"])
