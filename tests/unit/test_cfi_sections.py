""".eh_frame / .debug_frame entry parsing, .eh_frame_hdr search, and table lookups (issue 3).

Layouts: DWARF 5 section 6.4.1 and 7.24; LSB Core 5.0 sections 10.6.1 (.eh_frame) and 10.6.2
(.eh_frame_hdr).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from profiler.binary.cfi.eh_frame_hdr import parse_eh_frame_hdr
from profiler.binary.cfi.entries import CfiSection
from profiler.binary.cfi.rules import CfaKind, RuleKind, UnwindKind
from profiler.errors import BinaryError
from profiler.model import DW_RA, DW_RBP, DW_RSP
from tests.support.cfi_builder import CfiBuilder, advance_loc, def_cfa, def_cfa_offset, offset

GCC_CIE = def_cfa(DW_RSP, 8) + offset(DW_RA, 1)
PUSH_RBP = advance_loc(1) + def_cfa_offset(16) + offset(DW_RBP, 2)  # after `push %rbp`


def three_functions(**kw: object) -> CfiBuilder:
    """f at 0x1000 (leaf), g at 0x1100 (pushes rbp), h at 0x1300; a gap at [0x1040, 0x1100)."""
    b = CfiBuilder(**kw)  # type: ignore[arg-type]
    cie = b.cie(GCC_CIE) if b.eh_frame else b.cie(GCC_CIE, augmentation=b"")
    b.fde(cie, 0x1300, 0x80, PUSH_RBP)
    b.fde(cie, 0x1000, 0x40, b"")
    b.fde(cie, 0x1100, 0x200, PUSH_RBP)
    return b


@pytest.mark.parametrize("kw", [{}, {"dwarf64": True}, {"eh_frame": False}, {"eh_frame": False, "dwarf64": True}])
def test_scan_finds_every_fde_in_both_formats_and_lengths(kw: dict[str, bool]) -> None:
    index = three_functions(**kw).cfi_section().scan()
    assert index.starts.tolist() == [0x1000, 0x1100, 0x1300]
    assert index.starts.dtype == np.uint64


@pytest.mark.parametrize("kw", [{}, {"eh_frame": False, "dwarf64": True}])
def test_lookup_picks_the_row_in_force(kw: dict[str, bool]) -> None:
    table = three_functions(**kw).table()
    assert table.rule_for(0x1100).cfa_offset == 8  # at the push
    rule = table.rule_for(0x1101)
    assert (rule.kind, rule.cfa_register, rule.cfa_offset, rule.ra_offset) == (UnwindKind.FAST, DW_RSP, 16, -8)
    assert rule.saved == ((DW_RBP, -16),)
    assert table.rule_for(0x12FF) is rule  # the memo hands back the same compiled rule
    assert table.rule_for(0x1040) is None  # in the gap after f
    assert table.rule_for(0x0FFF) is None and table.rule_for(0x1380) is None


def test_only_the_hit_fde_is_decoded() -> None:
    table = three_functions().table(hdr_svma=0x800)
    table.rule_for(0x1105)
    assert table.stats.decoded_fdes == 1
    table.rule_for(0x1010)
    assert table.stats.decoded_fdes == 2


def test_eh_frame_hdr_table_matches_the_scan() -> None:
    b = three_functions()
    section = b.cfi_section()
    index = parse_eh_frame_hdr(b.eh_frame_hdr(0x800), 0x800, b.svma, len(section.data))
    assert index is not None
    scanned = section.scan()
    assert index.starts.tolist() == scanned.starts.tolist()
    assert index.offsets.tolist() == scanned.offsets.tolist()
    assert index.find(0x1000) == 0 and index.find(0x12FF) == 1 and index.find(0xFFF) == -1
    assert index.find(-5) == -1 and index.find(1 << 64) == -1


def test_eh_frame_hdr_without_table_returns_none() -> None:
    hdr = struct.pack("<BBBBi", 1, 0x1B, 0xFF, 0xFF, 0x10000 - 0x804)  # fde_count_enc = DW_EH_PE_omit
    assert parse_eh_frame_hdr(hdr, 0x800, 0x10000, 100) is None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda h: b"\x02" + h[1:],  # unknown version
        lambda h: h[:6],  # truncated eh_frame_ptr
        lambda h: h[:8] + b"\xff\xff\xff\x7f" + h[12:],  # fde_count far larger than the table
        lambda h: h[:4] + struct.pack("<i", 0x1234) + h[8:],  # points somewhere other than .eh_frame
        lambda h: h[:16] + struct.pack("<i", 0x7FFF0000) + h[20:],  # an FDE pointer outside .eh_frame
    ],
)
def test_corrupt_eh_frame_hdr_raises_binary_error(mutate: object) -> None:
    b = three_functions()
    hdr = mutate(b.eh_frame_hdr(0x800))  # type: ignore[operator]
    with pytest.raises(BinaryError):
        parse_eh_frame_hdr(hdr, 0x800, b.svma, len(b.section()))


def test_unsorted_hdr_table_is_sorted() -> None:
    b = three_functions()
    hdr = bytearray(b.eh_frame_hdr(0x800))
    hdr[12:20], hdr[20:28] = hdr[20:28], hdr[12:20]  # swap the first two entries
    index = parse_eh_frame_hdr(bytes(hdr), 0x800, b.svma, len(b.section()))
    assert index is not None and index.starts.tolist() == [0x1000, 0x1100, 0x1300]


def test_signal_frame_augmentation_and_cie_fields() -> None:
    b = CfiBuilder()
    cie_at = b.cie(GCC_CIE, augmentation=b"zRS", code_align=1, data_align=-8, ra=16)
    cie = b.cfi_section().cie_at(cie_at)
    assert cie.is_signal_frame and cie.augmentation == b"zRS" and cie.fde_encoding == 0x1B
    assert (cie.code_alignment_factor, cie.data_alignment_factor, cie.return_address_register) == (1, -8, 16)


def test_signal_frame_rows_are_flagged() -> None:
    b = CfiBuilder()
    b.fde(b.cie(GCC_CIE, augmentation=b"zRS"), 0x1000, 0x10, b"")
    row, signal = b.table().row_for(0x1004)  # type: ignore[misc]
    assert signal and row.cfa == (CfaKind.REGISTER, DW_RSP, 8)
    assert b.table().rule_for(0x1004).kind == UnwindKind.GENERIC  # signal frames take the generic path


def test_cie_version_4_in_debug_frame() -> None:
    b = CfiBuilder(eh_frame=False)
    b.fde(b.cie(GCC_CIE, augmentation=b"", version=4), 0x2000, 0x10, b"")
    cie = b.cfi_section().fde_at(b.fdes[0][1]).cie
    assert (cie.version, cie.address_size, cie.segment_selector_size) == (4, 8, 0)


def test_ra_undefined_is_the_end_of_the_stack() -> None:
    b = CfiBuilder()
    b.fde(b.cie(GCC_CIE), 0x1000, 0x10, b"\x07\x10")  # DW_CFA_undefined rip (glibc's _start)
    assert b.table().rule_for(0x1000).kind == UnwindKind.END


def test_real_personality_and_lsda_augmentations_parse() -> None:
    """libstdc++/libc FDEs of C++ or cleanup code use "zPLR": a personality pointer before 'R'."""
    from profiler.binary.elf import ElfFile

    path = "/lib/x86_64-linux-gnu/libc.so.6"
    elf = ElfFile(path)
    info = elf.sections[".eh_frame"]
    section = CfiSection(bytes(elf.section_data(".eh_frame") or b""), info.sh_addr, True, "libc")
    index = section.scan()
    cies = {section.fde_at(int(o)).cie.augmentation for o in index.offsets}
    assert b"zPLR" in cies and b"zRS" in cies


# --- corrupt entries ---------------------------------------------------------------------------------------


def test_entry_running_past_the_section_is_binary_error() -> None:
    data = bytearray(three_functions().section())
    data[0:4] = struct.pack("<I", 0x7FFFFFF0)
    with pytest.raises(BinaryError):
        CfiSection(bytes(data), 0x10000, True, "t").scan()


def test_fde_pointing_at_a_non_cie_gives_no_row() -> None:
    b = three_functions()
    data = bytearray(b.section())
    first_fde = b.fdes[0][1]
    data[first_fde + 4 : first_fde + 8] = struct.pack("<I", 4)  # CIE pointer to the middle of an entry
    section = CfiSection(bytes(data), b.svma, True, "t")
    with pytest.raises(BinaryError):
        section.fde_at(first_fde)


def test_unknown_augmentation_without_z_is_binary_error() -> None:
    b = CfiBuilder()
    at = b.cie(GCC_CIE, augmentation=b"xyz")
    with pytest.raises(BinaryError):
        b.cfi_section().cie_at(at)


def test_a_corrupt_fde_is_no_row_and_counted() -> None:
    b = CfiBuilder()
    cie = b.cie(GCC_CIE)
    b.fde(cie, 0x1000, 0x10, b"\x0b")  # restore_state with nothing remembered
    b.fde(cie, 0x1010, 0x10, b"")
    table = b.table()
    assert table.rule_for(0x1004) is None
    assert table.rule_for(0x1014) is not None
    assert table.stats.bad_fdes == 1 and "restore_state" in table.stats.errors[0]


def test_rule_kinds_round_trip_through_the_columns() -> None:
    b = CfiBuilder()
    program = (
        b"\x10\x03\x02\x77\x10"  # DW_CFA_expression rbx {DW_OP_breg7 16}
        + b"\x09\x0c\x0d"  # DW_CFA_register r12 in r13
        + b"\x14\x00\x01"  # DW_CFA_val_offset rax, 1 (a caller-saved register: side table)
    )
    b.fde(b.cie(GCC_CIE), 0x1000, 0x10, program)
    row, _signal = b.table().row_for(0x1000)  # type: ignore[misc]
    assert row.registers == {
        16: (RuleKind.OFFSET, -8),
        3: (RuleKind.EXPRESSION, b"\x77\x10"),
        12: (RuleKind.REGISTER, 13),
        0: (RuleKind.VAL_OFFSET, -8),
    }
