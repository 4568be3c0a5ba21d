"""Line-table decoders against CPython itself, for every installed interpreter, plus hand-built edge cases.

Each interpreter compiles a corpus (stdlib modules and a synthetic source with big jumps, loops, comprehension
and exception handlers) and reports, for every instruction offset, what ``PyCode_Addr2Line`` -- the C
function tracebacks use -- answers (``tests/targets/python/dump_linetables.py``). The decoder must agree at
every offset, including the "not started" offset -1 and offsets past the end.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from agents.cpython.layout import LineTableFormat
from agents.cpython.linetable import decode, decode_linetable_310, decode_lnotab, decode_locations
from tests.targets.python.interpreters import TARGETS, interpreter_params

CORPUS = ["inspect", "argparse", "typing", "asyncio.base_events"]


def table_format(version: tuple[int, int]) -> LineTableFormat:
    if version < (3, 10):
        return LineTableFormat.LNOTAB
    return LineTableFormat.LINETABLE_310 if version == (3, 10) else LineTableFormat.LOCATIONS


@pytest.mark.parametrize("interp", interpreter_params())
def test_decoder_agrees_with_pycode_addr2line(interp):
    script = os.path.join(TARGETS, "dump_linetables.py")
    out = subprocess.run([interp.path, script, *CORPUS], capture_output=True, text=True, timeout=120, check=True)
    codes = json.loads(out.stdout)
    assert len(codes) > 500
    fmt = table_format(interp.version)
    checked = 0
    for code in codes:
        table = decode(fmt, bytes.fromhex(code["table"]), code["first"])
        got = [table.line(unit) for unit in code["units"]]
        assert got == code["lines"], f"first line {code['first']}, table {code['table']}"
        checked += len(got)
    assert checked > 20_000


def test_lnotab_negative_and_split_increments():
    # (byte increment, signed line increment): +3 lines at 0, a 300-byte jump split in two, then -2 lines
    table = bytes([0, 3, 255, 0, 45, 0xFE])
    t = decode_lnotab(table, 10)
    assert [t.line(x) for x in (-1, 0, 254, 255, 299, 300, 1000)] == [10, 13, 13, 13, 13, 11, 11]


def test_linetable_310_no_line_ranges():
    # (byte length, signed delta): 4 bytes at +1, 2 bytes with no line (-128 keeps the running line), 4 at +2
    t = decode_linetable_310(bytes([4, 1, 2, 0x80, 4, 2]), 5)
    assert [t.line(unit) for unit in range(-1, 6)] == [5, 6, 6, None, 8, 8, None]


def test_locations_every_entry_kind():
    table = bytes(
        [
            0x80 | 0 << 3 | 0, 0x12,  # short form, 1 unit, same line (one column byte)
            0x80 | 11 << 3 | 1, 4, 9,  # one-line form +1, 2 units (two column bytes)
            0x80 | 13 << 3 | 0, 0x03,  # no columns, signed varint 3 -> -1
            0x80 | 14 << 3 | 0, 0x48, 0x01, 0, 2, 5,  # long form, varint 0x48,0x01 = 72 -> +36, then 3 varints
            0x80 | 15 << 3 | 2,  # no location, 3 units
            0x80 | 10 << 3 | 0, 1, 2,  # one-line form +0, 1 unit
        ]
    )  # fmt: skip
    t = decode_locations(table, 100)
    assert [t.line(unit) for unit in range(-1, 10)] == [100, 100, 101, 101, 100, 136, None, None, None, 136, None]


def test_corrupt_location_table_keeps_what_it_decoded():
    t = decode_locations(bytes([0x80 | 13 << 3 | 1, 0x02, 0x05, 0x05]), 1)  # garbage after the first entry
    assert [t.line(unit) for unit in range(3)] == [2, 2, None]
