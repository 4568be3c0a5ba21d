"""An ``UnwindTable`` as plain numpy arrays, for the disk cache, and back, validated field by field.

What is saved: each source's FDE search index and which FDEs were decoded (and into which rows), the
compiled rows, and the expression and extra-rule side tables. A restored table therefore skips the
``.debug_frame`` scan and every FDE decoded by earlier sessions; FDEs not decoded yet are still
decoded on demand.

A cache file is never trusted: every id and slice is bounds-checked before use, and anything out of
range raises ``BinaryError`` so the caller discards the entry and rebuilds.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from profiler.binary.cache import Arrays
from profiler.binary.cfi.columns import NO_RULE, ROW_DTYPE, RowColumns
from profiler.binary.cfi.entries import FdeIndex
from profiler.binary.cfi.rules import CFA_EXPRESSION, EXPRESSION_KINDS, CfaKind, RuleKind, UnwindKind
from profiler.binary.cfi.table import CfiSource, UnwindTable
from profiler.errors import BinaryError

_MAX_RULE_KIND = max(RuleKind)
_MAX_CFA_KIND = max(CfaKind)
_MAX_UNWIND_KIND = max(UnwindKind)


def source_meta(source: CfiSource) -> list[int]:
    """What must match for a cached index to describe this section: kind, svma and size."""
    s = source.section
    return [int(s.is_eh_frame), s.svma, len(s.data)]


def table_to_arrays(table: UnwindTable) -> Arrays:
    columns = table.columns
    blob = b"".join(columns.expressions)
    expr_ends = np.cumsum([len(e) for e in columns.expressions], dtype=np.int64)
    flat = [rule for rules in columns.extras for rule in rules]
    extra_ends = np.cumsum([len(rules) for rules in columns.extras], dtype=np.int64)
    arrays: Arrays = {
        "rows": columns.valid.copy(),
        "expr_blob": np.frombuffer(blob, dtype=np.uint8).copy(),
        "expr_ends": expr_ends,
        "extra_rules": np.array(flat, dtype=np.int64).reshape(-1, 3),
        "extra_ends": extra_ends,
        "nsources": np.array(len(table.sources), dtype=np.int64),
    }
    for s, source in enumerate(table.sources):
        arrays[f"src{s}_meta"] = np.array(source_meta(source), dtype=np.int64)
        arrays[f"src{s}_starts"] = source.fde_index.starts
        arrays[f"src{s}_offsets"] = source.fde_index.offsets
        slots = np.array(table.slots(s), dtype=np.int64).reshape(-1, 3)
        # An FDE that failed to decode (all-zero slot) is stored as not decoded yet: decoding it again is
        # cheap, and it must be counted (and warned about) in every recording that meets it.
        slots[(slots == 0).all(axis=1)] = -1
        arrays[f"src{s}_slots"] = slots
    return arrays


def table_from_arrays(sources: list[CfiSource], arrays: Arrays) -> UnwindTable:
    """Rebuild a table over ``sources`` (their indexes may be missing); BinaryError if anything is off."""
    try:
        return _restore(sources, arrays)
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise BinaryError(f"cached unwind table is malformed ({e})") from e


def _restore(sources: list[CfiSource], arrays: Arrays) -> UnwindTable:
    if int(arrays["nsources"]) != len(sources):
        raise BinaryError("cached unwind table has other sources")
    rows: npt.NDArray[np.void] = arrays["rows"]  # type: ignore[assignment]  # (checked just below)
    if rows.dtype != ROW_DTYPE or rows.ndim != 1:
        raise BinaryError("cached unwind rows have another layout")
    expressions = _split_bytes(arrays["expr_blob"], arrays["expr_ends"])
    extras = _split_rules(arrays["extra_rules"], arrays["extra_ends"], len(expressions))
    _check_rows(rows, len(expressions), len(extras))
    restored, slots = [], []
    for s, source in enumerate(sources):
        if arrays[f"src{s}_meta"].tolist() != source_meta(source):
            raise BinaryError(f"cached unwind table describes another {source.origin}")
        index = FdeIndex(arrays[f"src{s}_starts"].astype(np.uint64), arrays[f"src{s}_offsets"].astype(np.int64))
        _check_index(index, len(source.section.data))
        slot = arrays[f"src{s}_slots"].astype(np.int64)
        _check_slots(slot, len(index), len(rows))
        restored.append(CfiSource(source.section, index, source.origin))
        slots.append(slot)
    columns = RowColumns.restored(rows, expressions, extras)
    return UnwindTable(restored, columns, slots)


def _spans(ends: np.ndarray, total: int, what: str) -> list[tuple[int, int]]:
    """[start, end) of each item of a flattened side table, from its cumulative ends."""
    bounds = [0, *ends.astype(np.int64).tolist()]
    if any(b < a for a, b in zip(bounds[:-1], bounds[1:])) or bounds[-1] != total:
        raise BinaryError(f"cached {what} table is inconsistent")
    return list(zip(bounds[:-1], bounds[1:]))


def _split_bytes(blob: np.ndarray, ends: np.ndarray) -> list[bytes]:
    data = blob.astype(np.uint8).tobytes()
    return [data[a:b] for a, b in _spans(ends, len(data), "expression")]


def _split_rules(flat: np.ndarray, ends: np.ndarray, n_expr: int) -> list[tuple[tuple[int, int, int], ...]]:
    rules = flat.astype(np.int64).reshape(-1, 3).tolist()
    for reg, kind, arg in rules:
        if reg < 0 or not 0 <= kind <= _MAX_RULE_KIND or (kind in EXPRESSION_KINDS and not 0 <= arg < n_expr):
            raise BinaryError("cached extra rule is out of range")
    return [tuple((r[0], r[1], r[2]) for r in rules[a:b]) for a, b in _spans(ends, len(rules), "extra-rule")]


def _check_rows(rows: np.ndarray, n_expr: int, n_extra: int) -> None:
    if not len(rows):
        return
    expr_cfa = rows["cfa_kind"] == CFA_EXPRESSION
    kinds, args = rows["rule_kind"], rows["rule_arg"]
    expr_rule = np.isin(kinds, EXPRESSION_KINDS)
    bad = (
        (rows["cfa_kind"] > _MAX_CFA_KIND)
        | (rows["kind"] > _MAX_UNWIND_KIND)
        | (expr_cfa & ((rows["cfa_arg"] < 0) | (rows["cfa_arg"] >= n_expr)))
        | np.any((kinds > _MAX_RULE_KIND) & (kinds != NO_RULE), axis=1)
        | np.any(expr_rule & ((args < 0) | (args >= n_expr)), axis=1)
        | (rows["extra"] < -1)
        | (rows["extra"] >= n_extra)
    )
    if bool(bad.any()):
        raise BinaryError("cached unwind rows are out of range")


def _check_index(index: FdeIndex, section_size: int) -> None:
    if len(index.offsets) != len(index.starts):
        raise BinaryError("cached FDE index is inconsistent")
    if len(index) and (
        index.offsets.min() < 0 or index.offsets.max() >= section_size or np.any(index.starts[1:] < index.starts[:-1])
    ):
        raise BinaryError("cached FDE index is out of range")


def _check_slots(slots: np.ndarray, n_fdes: int, n_rows: int) -> None:
    if slots.shape != (n_fdes, 3):
        raise BinaryError("cached FDE slots do not match the index")
    pending = np.all(slots == -1, axis=1)
    lo, hi = slots[:, 0], slots[:, 1]
    if bool(np.any(~pending & ((lo < 0) | (lo > hi) | (hi > n_rows)))):
        raise BinaryError("cached FDE slots are out of range")
