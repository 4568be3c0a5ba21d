"""``_Py_DebugOffsets`` parsing and validation: the live struct of the installed 3.13, and corrupted copies."""

from __future__ import annotations

import struct
import subprocess

import pytest

from agents.cpython.debug_offsets import SPECS, DebugOffsetsError, layout_from_debug_offsets, parse
from agents.cpython.layout import FrameStruct
from tests.targets.python.interpreters import interpreter_params

DUMP = (
    "import ctypes, sys; "
    "runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, '_PyRuntime')); "
    "sys.stdout.write(ctypes.string_at(runtime, 1024).hex())"
)


def _live_313() -> bytes:
    found = [p.values[0] for p in interpreter_params() if p.id == "3.13" and p.values[0] is not None]
    if not found:
        pytest.skip("no CPython 3.13 installed")
    out = subprocess.run([found[0].path, "-c", DUMP], capture_output=True, text=True, timeout=60, check=True)
    return bytes.fromhex(out.stdout)


@pytest.fixture(scope="module")
def live() -> bytes:
    return _live_313()


def _block_at(spec, name: str) -> int:
    at = 24
    for block, fields in spec:
        if block == name:
            return at
        at += 8 * len(fields)
    raise KeyError(name)


def test_live_313_layout_matches_offsetof(live):
    layout = layout_from_debug_offsets(live, (3, 13))
    # offsetof() on the 3.13.0 headers (reference section 1.7 and this agent's probe)
    i = layout.interpreter
    assert (layout.runtime.interpreters_head, i.next, i.threads_head, i.modules) == (632, 7264, 7344, 7656)
    assert (i.ceval_gil, i.gil_last_holder, i.gil_locked) == (16, 8, 16)
    t = layout.thread
    assert (t.next, t.interp, t.frame, t.thread_id, t.native_thread_id) == (8, 16, 72, 152, 160)
    assert t.cframe_current_frame is None
    f = layout.frame
    assert (f.kind, f.code, f.previous, f.instr, f.owner) == (FrameStruct.INTERPRETER_FRAME, 0, 8, 56, 70)
    assert f.localsplus == 72 and f.shim_owners == {3}
    c = layout.code
    assert (c.firstlineno, c.filename, c.name, c.qualname, c.linetable) == (68, 112, 120, 128, 136)
    assert (c.code_adaptive, c.version) == (200, 92)
    o = layout.objects
    assert (o.unicode_ascii_size, o.unicode_compact_size, o.tuple_items, o.long_digits) == (40, 56, 24, 24)
    assert layout.source == "_Py_DebugOffsets"


def test_whole_struct_size_matches_the_reference(live):
    spec = SPECS[(3, 13)]
    assert 24 + 8 * sum(len(fields) for _, fields in spec) == 584  # reference section 1.4, verified live
    assert _block_at(spec, "thread_state") == 152 and _block_at(spec, "gc") == 568
    spec14 = SPECS[(3, 14)]
    assert _block_at(spec14, "thread_state") == 176 and _block_at(spec14, "dict_object") == 528


def _corrupt(data: bytes, offset: int, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<Q", out, offset, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("what", "mutate", "message"),
    [
        ("cookie", lambda d: b"xdebugpz" + d[8:], "cookie"),
        ("version", lambda d: _corrupt(d, 8, 0x030C00F0), "3.12"),
        ("free-threaded", lambda d: _corrupt(d, 16, 1), "free-threaded"),
        ("huge size", lambda d: _corrupt(d, _block_at(SPECS[(3, 13)], "thread_state"), 1 << 30), "implausible"),
        ("field outside", lambda d: _corrupt(d, _block_at(SPECS[(3, 13)], "code_object") + 8, 10_000), "outside"),
        ("truncated", lambda d: d[:300], "truncated"),
    ],
)
def test_invalid_debug_offsets_are_rejected(live, what, mutate, message):
    with pytest.raises(DebugOffsetsError, match=message):
        parse(mutate(live), (3, 13))


def test_expected_version_must_match(live):
    with pytest.raises(DebugOffsetsError, match="expected 3.14"):
        parse(live, (3, 14))
