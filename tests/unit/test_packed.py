"""Packed rows (``profiler/binary/packed.py``): merged keys keep their own rows, in key order."""

from __future__ import annotations

import numpy as np

from profiler.binary import packed


def test_merged_keys_keep_their_rows_in_key_order():
    keys, ends = np.array([10, 30], dtype=np.uint64), np.array([2, 3], dtype=np.int64)
    rows = {"v": np.array([100, 101, 300], dtype=np.int64)}
    new_keys, new_ends = np.array([5, 20, 40], dtype=np.uint64), np.array([1, 3, 3], dtype=np.int64)
    new_rows = {"v": np.array([50, 200, 201], dtype=np.int64)}
    out_keys, out_ends, out = packed.merged(keys, ends, rows, new_keys, new_ends, new_rows)
    assert out_keys.tolist() == [5, 10, 20, 30, 40]
    assert packed.well_formed(out_keys, out_ends, len(out["v"]))
    spans = {int(k): out["v"][slice(*packed.span(out_keys, out_ends, int(k)))].tolist() for k in out_keys}
    assert spans == {5: [50], 10: [100, 101], 20: [200, 201], 30: [300], 40: []}
    assert packed.span(out_keys, out_ends, 7) is None


def test_well_formed_refuses_unsorted_keys_and_ends_that_do_not_reach_the_rows():
    assert not packed.well_formed(np.array([2, 1]), np.array([1, 2]), 2)
    assert not packed.well_formed(np.array([1, 2]), np.array([2, 1]), 2)
    assert not packed.well_formed(np.array([1, 2]), np.array([1, 2]), 3)
    assert packed.well_formed(np.array([], dtype=np.uint64), np.array([], dtype=np.int64), 0)
