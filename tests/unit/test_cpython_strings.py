"""``str`` decoding from real object bytes of every interpreter (ASCII, Latin-1, UCS2, UCS4), and edge cases."""

from __future__ import annotations

import json
import struct
import subprocess

import pytest

from agents.cpython.offsets import TABLES
from agents.cpython.strings import MAX_CHARS, read_bytes, read_str
from tests.targets.python.interpreters import interpreter_params

SAMPLES = ["", "ascii only", "caf\xe9 \xff", "euro \u20ac \u4e2d", "snake \U0001f40d \u20ac \xe9", "x" * 5000]
DUMP = """
import ctypes, json, sys
samples = json.loads(sys.argv[1])
objects = [(id(s), ctypes.string_at(id(s), sys.getsizeof(s)).hex()) for s in samples]
b = b"\\x00raw bytes\\xff"
objects.append((id(b), ctypes.string_at(id(b), sys.getsizeof(b)).hex()))
print(json.dumps({"str_type": id(str), "bytes_type": id(bytes), "objects": objects}))
"""


def memory(objects: dict[int, bytes]):
    def read(addr: int, size: int) -> bytes:
        for start, data in objects.items():
            if start <= addr < start + len(data):
                return data[addr - start : addr - start + size]
        return b""

    return read


def layout_for(version: tuple[int, int]):
    if version >= (3, 13):
        return TABLES[(3, 12)].objects  # 3.13 string layout equals 3.12's (PyASCIIObject 40 bytes)
    return TABLES[version].objects


@pytest.mark.parametrize("interp", interpreter_params())
def test_real_strings_decode(interp):
    out = subprocess.run([interp.path, "-c", DUMP, json.dumps(SAMPLES)], capture_output=True, text=True,
                         timeout=60, check=True)
    dump = json.loads(out.stdout)
    objects = {addr: bytes.fromhex(data) for addr, data in dump["objects"]}
    read = memory(objects)
    o = layout_for(interp.version)
    for (addr, _), expected in zip(dump["objects"], SAMPLES):
        text = read_str(read, addr, o, dump["str_type"])
        if len(expected) > MAX_CHARS:
            assert text == expected[:MAX_CHARS] + "..."
        else:
            assert text == expected
        assert read_str(read, addr, o, dump["bytes_type"]) is None  # a str is not accepted as another type
    bytes_addr = dump["objects"][-1][0]
    assert read_bytes(read, bytes_addr, o, dump["bytes_type"]) == b"\x00raw bytes\xff"


def _header(o, length: int, state: int, type_addr: int = 0x1234) -> bytearray:
    raw = bytearray(o.unicode_compact_size + 8)
    struct.pack_into("<qQq", raw, 0, 1, type_addr, length)
    struct.pack_into("<I", raw, o.unicode_state, state)
    return raw


def test_legacy_non_compact_string_follows_its_data_pointer():
    o = TABLES[(3, 8)].objects
    raw = _header(o, 3, 2 << 2 | 1 << 7)  # UCS2, not compact, ready
    struct.pack_into("<Q", raw, o.unicode_compact_size, 0x9000)  # PyUnicodeObject.data.any
    read = memory({0x8000: bytes(raw), 0x9000: "a\u20acz".encode("utf-16-le")})
    assert read_str(read, 0x8000, o) == "a\u20acz"


@pytest.mark.parametrize(
    ("state", "length"),
    [
        (3 << 2 | 1 << 5, 2),  # kind 3 does not exist
        (0 << 2 | 1 << 5, 2),  # kind 0: a legacy string that is not ready
        (2 << 2 | 1 << 5 | 1 << 6, 2),  # "ascii" but UCS2
        (1 << 2 | 1 << 5, -5),  # negative length
    ],
)
def test_garbage_headers_are_rejected(state, length):
    o = TABLES[(3, 12)].objects
    read = memory({0x8000: bytes(_header(o, length, state)) + b"\0" * 64})
    assert read_str(read, 0x8000, o) is None


def test_unreadable_or_implausible_pointers():
    o = TABLES[(3, 12)].objects
    read = memory({})
    assert read_str(read, 0x8000, o) is None
    assert read_str(read, 0, o) is None
    assert read_str(read, 0x8003, o) is None
    assert read_bytes(read, 1 << 60, o) is None
