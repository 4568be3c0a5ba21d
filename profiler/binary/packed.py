"""Packed rows: the layout of the disk cache's entries that hold a run of rows per key (``line_cache.py``: the
rows of each line program; ``frame_store.py``: the frames of each address). Sorted unique ``keys``, and per
key the end of its rows in the row columns (``ends``, cumulative). Looked up with one ``searchsorted``, merged
with new keys without going back through Python objects, and checked whole when loaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]  #: keys: uint64; ends: int64 (as the entries hold them)
Columns = dict[str, Array]


def span(keys: Array, ends: Array, key: int) -> tuple[int, int] | None:
    """The rows ``[start, end)`` of ``key``, or None if it is not one of ``keys``."""
    at = int(np.searchsorted(keys, np.uint64(key)))
    if at >= len(keys) or int(keys[at]) != key:
        return None
    return (int(ends[at - 1]) if at else 0), int(ends[at])


def merged(
    keys: Array, ends: Array, columns: Columns,
    new_keys: Array, new_ends: Array, new_columns: Columns,
) -> tuple[Array, Array, Columns]:  # fmt: skip
    """Two packed sets as one, its keys sorted; ``new_keys`` must not be among ``keys``. Every column of
    ``columns`` is in ``new_columns``, of the same dtype."""
    all_keys = np.concatenate((keys, new_keys))
    order = np.argsort(all_keys, kind="stable")
    stored_rows = int(ends[-1]) if len(ends) else 0
    all_ends = np.concatenate((ends, new_ends + stored_rows))
    starts = np.concatenate(([0], all_ends[:-1])).astype(np.int64)
    lengths = (all_ends - starts)[order]
    first = starts[order]
    # each key's rows, in the keys' new order, gathered without a Python loop
    rows = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    out = {name: np.concatenate((column, new_columns[name]))[rows] for name, column in columns.items()}
    return all_keys[order], np.cumsum(lengths, dtype=np.int64), out


def well_formed(keys: Array, ends: Array, rows: int) -> bool:
    """``keys`` sorted and unique, one end per key, the ends rising from 0 to exactly ``rows``."""
    if len(keys) != len(ends):
        return False
    if len(keys) > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        return False
    if not len(ends):
        return rows == 0
    return bool(int(ends[0]) >= 0 and not np.any(np.diff(ends) < 0) and int(ends[-1]) == rows)
