"""Corrupt DWARF never escapes as anything but data: ``[]`` (or frames without the broken part) for the
affected addresses and a note saying why, never an exception and never a hang.

Copies of a small gcc -O2 -g binary are damaged in memory: random bytes flipped in each debug section,
sections truncated through their section header, DW_AT_sibling links pointed backwards,
DW_AT_abstract_origin links pointed at themselves. Byte-level fixtures then hit the bounds directly:
DIEs nested past the depth limit, line programs with a zero-length extended opcode or an address that
overflows 64 bits, and a compressed section whose header lies about its size.
"""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import time

import pytest
from elftools.elf.elffile import ELFFile

from profiler.binary.cache import TableCache
from profiler.binary.elf import ElfFile
from profiler.binary.objfile import ObjectFileCache
from profiler.errors import BinaryError
from profiler.model import FrameInfo
from profiler.symbolize.dwarf import DwarfResolver
from profiler.symbolize.dwarf_dies import UnitDies
from profiler.symbolize.dwarf_forms import parse_abbrevs
from profiler.symbolize.dwarf_sections import DebugSections
from profiler.symbolize.dwarf_units import read_unit_header
from profiler.symbolize.line_header import LineHeader
from profiler.symbolize.line_table import DwarfLineTable
from profiler.symbolize.symbolizer import _DwarfFrames
from tests.unit.test_symbolize_dwarf import C_SOURCE, build, instructions

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed")

SECTIONS = (".debug_info", ".debug_abbrev", ".debug_line", ".debug_aranges", ".debug_rnglists", ".debug_str",
            ".debug_line_str")  # fmt: skip
TRIALS_PER_SECTION = 60
#: one damaged copy of a 20 KB binary must resolve in far less than this, whatever the damage
TRIAL_SECONDS = 2.0


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> tuple[bytes, list[int], list]:
    path = build(tmp_path_factory, "corrupt", C_SOURCE, [])
    every, _calls = instructions(path, "main")
    with open(path, "rb") as f:
        data = f.read()
    healthy = DwarfResolver(ElfFile("healthy", data=data)).resolve(every + [0, 0x10])
    assert any(len(frames or []) > 2 for frames in healthy)
    return data, every + [0, 0x10], healthy


def section_range(data: bytes, name: str) -> tuple[int, int]:
    info = ElfFile("probe", data=data).sections[name]
    return info.sh_offset, info.sh_size


def resolve_damaged(data: bytes, addresses: list[int]) -> tuple[list, DwarfResolver | None]:
    """Resolve ``addresses`` in a damaged image; asserts the contract and returns the frames."""
    started = time.monotonic()
    try:
        resolver = DwarfResolver(ElfFile("damaged", data=data))
    except BinaryError:
        return [], None  # a file whose section table itself is unreadable: allowed, and only this
    results = resolver.resolve(addresses)
    assert time.monotonic() - started < TRIAL_SECONDS
    assert resolver.unexpected_errors == 0, resolver.notes
    assert len(results) == len(addresses)
    assert all(isinstance(frames, list) and all(isinstance(f, FrameInfo) for f in frames) for frames in results)
    return results, resolver


@pytest.mark.parametrize("section", SECTIONS)
def test_flipped_bytes_degrade_to_data(program, section):
    data, addresses, _healthy = program
    start, size = section_range(data, section)
    rng = random.Random(f"{section}-flip")
    for _ in range(TRIALS_PER_SECTION):
        damaged = bytearray(data)
        for _ in range(rng.randrange(1, 9)):
            damaged[start + rng.randrange(size)] ^= 1 << rng.randrange(8)
        resolve_damaged(bytes(damaged), addresses)


@pytest.mark.parametrize("section", SECTIONS)
def test_truncated_sections_degrade_to_data(program, section):
    data, addresses, _healthy = program
    elf = ELFFile(__import__("io").BytesIO(data))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == section)
    header_at = elf["e_shoff"] + index * elf["e_shentsize"] + 32  # Elf64_Shdr.sh_size
    size = struct.unpack_from("<Q", data, header_at)[0]
    for new_size in (0, 1, 7, size // 3, size // 2, size - 1, size + 10**9):
        damaged = bytearray(data)
        struct.pack_into("<Q", damaged, header_at, new_size)
        results, resolver = resolve_damaged(bytes(damaged), addresses)
        if new_size > size and resolver is not None:  # past the end of the file: one note, no frames
            assert all(frames == [] for frames in results) and resolver.notes


def readelf_attribute_offsets(path_or_data: bytes, attribute: str, tmp_path) -> list[tuple[int, int]]:
    """(offset in .debug_info of the attribute's value, offset of its DIE) for each use of ``attribute``."""
    binary = tmp_path / "probe"
    binary.write_bytes(path_or_data)
    dump = subprocess.run(["readelf", "--debug-dump=info", str(binary)], capture_output=True, text=True).stdout
    found, die = [], 0
    for line in dump.splitlines():
        if m := re.match(r"\s*<\d+><([0-9a-f]+)>:", line):
            die = int(m.group(1), 16)
        elif m := re.match(rf"\s*<([0-9a-f]+)>\s+{attribute}\s*:", line):
            found.append((int(m.group(1), 16), die))
    return found


def patch_references(data: bytes, attribute: str, value_of, tmp_path) -> bytes:
    """A copy of ``data`` with every ``attribute`` (a DW_FORM_ref4, as gcc writes DW_AT_sibling and
    DW_AT_abstract_origin, relative to its unit) set to ``value_of(DIE offset)``."""
    info_start, _size = section_range(data, ".debug_info")
    uses = readelf_attribute_offsets(data, attribute, tmp_path)
    assert uses
    damaged = bytearray(data)
    for value_at, die in uses:
        struct.pack_into("<I", damaged, info_start + value_at, value_of(die))
    return bytes(damaged)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf is needed")
@pytest.mark.parametrize("target", ["itself", "the unit start"])
def test_backward_siblings_are_ignored(program, tmp_path, target):
    data, addresses, healthy = program
    point = (lambda die: die) if target == "itself" else (lambda die: 0)
    damaged = patch_references(data, "DW_AT_sibling", point, tmp_path)
    results, _resolver = resolve_damaged(damaged, addresses)
    assert results == healthy  # a sibling that does not point forward is not followed


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf is needed")
def test_abstract_origin_loops_end(program, tmp_path):
    data, addresses, _healthy = program
    damaged = patch_references(data, "DW_AT_abstract_origin", lambda die: die, tmp_path)  # one unit, at 0
    results, _resolver = resolve_damaged(damaged, addresses)
    assert any(len(frames) > 1 for frames in results)  # the chains survive, with unnamed levels


# --- byte-level fixtures ------------------------------------------------------------------------------

#: abbreviations: 1 = DW_TAG_compile_unit with children, 2 = DW_TAG_lexical_block with children
#: (DWARF 5, section 7.5.3: code, tag, children flag, then (attribute, form) pairs ending in 0, 0)
_ABBREV = bytes([1, 0x11, 1, 0, 0, 2, 0x0B, 1, 0, 0, 0])


def unit(body: bytes) -> bytes:
    """A DWARF 5 compile unit header (section 7.5.1.1) around ``body``."""
    rest = struct.pack("<HBBI", 5, 1, 8, 0) + body
    return struct.pack("<I", len(rest)) + rest


def test_dies_nested_too_deep_raise_binary_error():
    depth = 1000
    info = unit(bytes([1]) + bytes([2]) * depth + bytes(depth + 1))
    header = read_unit_header(info, 0)
    dies = UnitDies(DebugSections(info, _ABBREV), header, parse_abbrevs(_ABBREV, 0, header.fmt))
    with pytest.raises(BinaryError):
        dies.end_of(dies.top.offset)
    with pytest.raises(BinaryError):
        list(dies.scan(dies.top, frozenset((0x0B,)), frozenset((0x0B,))))


def test_unterminated_children_stop_at_the_unit_end():
    info = unit(bytes([1]) + bytes([2]) * 10)  # no null entries at all
    header = read_unit_header(info, 0)
    dies = UnitDies(DebugSections(info, _ABBREV), header, parse_abbrevs(_ABBREV, 0, header.fmt))
    with pytest.raises(BinaryError):
        dies.end_of(dies.top.offset)


def line_header(program_length: int) -> LineHeader:
    # gcc's parameters: line_base -5, line_range 14, opcode_base 13 (DWARF 5, section 6.2.4)
    return LineHeader(5, 1, -5, 14, 13, (0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1), 0, program_length, {1: "a.c"})


def test_line_state_machine_rows():
    program = (
        bytes([0, 9, 2]) + struct.pack("<Q", 0x1000)  # DW_LNE_set_address 0x1000
        + bytes([3, 9])  # DW_LNS_advance_line +9 -> line 10
        + bytes([1])  # DW_LNS_copy: row (0x1000, 10)
        + bytes([13 + 5 + 14 * 4])  # special: address +4, line +0 -> row (0x1004, 10)
        + bytes([2, 6, 13 + 6])  # advance_pc 6; special: address +0, line +1 -> row (0x100a, 11)
        + bytes([2, 2, 0, 1, 1])  # advance_pc 2; DW_LNE_end_sequence at 0x100c
        + bytes([0, 9, 2]) + struct.pack("<Q", 0x100C)  # a second sequence starting where the first ends
        + bytes([3, 20, 1])  # line 21, copy: row (0x100c, 21)
        + bytes([13 + 14, 1, 0, 1, 1])  # special: address +1; copy; end_sequence at 0x100d, after (0x100d, 21)
    )  # fmt: skip
    table = DwarfLineTable(line_header(len(program)), program)
    assert table.lookup(0x1000) == ("a.c", 10) and table.lookup(0x1007) == ("a.c", 10)
    assert table.lookup(0x100A) == table.lookup(0x100B) == ("a.c", 11)
    assert table.lookup(0x100C) == ("a.c", 21)  # the second sequence wins over the first one's end
    assert table.lookup(0x0FFF) is None and table.lookup(0x100D) is None  # the last row for 0x100d is its end


@pytest.mark.parametrize(
    "program",
    [
        bytes([0, 0, 1]),  # extended opcode of length 0
        bytes([0, 50, 2, 0]),  # extended opcode longer than the program
        bytes([0, 9, 2]) + b"\xff" * 8 + bytes([2]) + b"\xff" * 9 + b"\x01" + bytes([1]),  # address > 2**64
        bytes([2]) + b"\x80" * 20,  # unterminated LEB128
    ],
)
def test_broken_line_programs_raise_binary_error(program):
    with pytest.raises(BinaryError):
        DwarfLineTable(line_header(len(program)), program)


def test_compressed_section_with_a_lying_header(program, tmp_path):
    data, addresses, _healthy = program
    (tmp_path / "plain").write_bytes(data)
    subprocess.run(
        ["objcopy", "--compress-debug-sections=zlib", str(tmp_path / "plain"), str(tmp_path / "zlib")], check=True
    )
    compressed = (tmp_path / "zlib").read_bytes()
    start, _size = section_range(compressed, ".debug_info")
    for ch_size in (0, 1, 1 << 40):
        damaged = bytearray(compressed)
        struct.pack_into("<Q", damaged, start + 8, ch_size)  # Elf64_Chdr.ch_size
        results, resolver = resolve_damaged(bytes(damaged), addresses)
        assert resolver is not None and resolver.notes and all(frames == [] for frames in results)


def test_a_file_whose_dwarf_is_damaged_is_named_in_a_notice(tmp_path, program):
    """The resolver's notes used to end with it: a damaged debug file lost its lines without a word. The
    symbolizer says which file, and the first thing that could not be read."""
    data, addresses, _healthy = program
    offset, _size = section_range(data, ".debug_info")
    damaged = bytearray(data)
    damaged[offset + 8 : offset + 12] = struct.pack("<I", 0xFFFFFF00)  # the first unit's abbrev offset (DWARF 5)
    path = tmp_path / "damaged"
    path.write_bytes(bytes(damaged))
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(str(path), str(path))
    notices: list[str] = []
    dwarf = _DwarfFrames(float("inf"), notices)
    dwarf.frames(obj, addresses)
    dwarf.frames(obj, addresses)  # the file of a second module (another process): told of once
    assert len(notices) == 1 and notices[0].startswith(f"{path}: ") and "could not be read" in notices[0]
    healthy_notices: list[str] = []
    (tmp_path / "healthy").write_bytes(data)
    healthy = ObjectFileCache(TableCache("cfi", enabled=False)).open(str(tmp_path / "healthy"))
    _DwarfFrames(float("inf"), healthy_notices).frames(healthy, addresses)
    assert healthy_notices == []
