"""Parse ``readelf --debug-dump=frames-interp``: the ground truth of the CFI differential test.

readelf (binutils ``dwarf.c``, ``frame_display_row``) prints, per FDE, one row per location with the CFA
as ``reg+off`` or ``exp`` and one column per register mentioned anywhere in the FDE::

    00000018 0000000000000024 0000001c FDE cie=00000000 pc=0000000000026000..0000000000026360
       LOC           CFA      rbx   ra
    0000000000026000 rsp+16   u     c-8

Register cells: ``u`` (undefined, or no rule yet), ``s`` (same value), ``c±N`` (offset), ``v±N``
(val_offset), ``rN (name)`` (register), ``exp`` / ``vexp`` (expressions). An FDE without rows uses the
row of its CIE.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from profiler.binary.cfi.rules import CfaKind, Row, RuleKind
from profiler.model import DWARF_REG_NAMES

_ENTRY = re.compile(r"^([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ (CIE|FDE)(?: cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?")
_CELL = re.compile(r"r\d+ \([^)]*\)|\S+")
_SECTION = re.compile(r"^Contents of the (\S+) section")
#: readelf's column names -> DWARF numbers (x86-64 psABI table 3.36); "ra" is the return address column
COLUMN_NUMBERS = {name: i for i, name in enumerate(DWARF_REG_NAMES[:16])} | {"ra": 16}


@dataclass
class ReadelfFde:
    start: int
    end: int
    cie: int
    rows: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # (loc, column -> cell)


@dataclass
class ReadelfFrames:
    fdes: list[ReadelfFde]
    cie_rows: dict[int, dict[str, str]]

    def expected_at(self, fde: ReadelfFde, addr: int) -> dict[str, str] | None:
        """The row in force at ``addr`` (the CIE's row if the FDE printed none)."""
        found = None
        for loc, cells in fde.rows:
            if loc <= addr:
                found = cells
        if found is None and not fde.rows:
            found = self.cie_rows.get(fde.cie)
        return found


def read_frames(path: str, section: str = ".eh_frame") -> ReadelfFrames:
    # readelf exits 1 on harmless complaints (libc.so.6: "Unable to find program interpreter name")
    out = subprocess.run(["readelf", "--debug-dump=frames-interp", path], capture_output=True, text=True).stdout
    if "Contents of the" not in out:
        raise RuntimeError(f"readelf printed no CFI for {path}")
    fdes: list[ReadelfFde] = []
    cie_rows: dict[int, dict[str, str]] = {}
    in_section = False
    current: ReadelfFde | None = None
    cie_at: int | None = None
    columns: list[str] = []
    for line in out.splitlines():
        if m := _SECTION.match(line):
            in_section = m.group(1) == section
            current = None
            continue
        if not in_section:
            continue
        if m := _ENTRY.match(line):
            current, cie_at = None, None
            if m.group(2) == "CIE":
                cie_at = int(m.group(1), 16)
            else:
                current = ReadelfFde(int(m.group(4), 16), int(m.group(5), 16), int(m.group(3), 16))
                fdes.append(current)
        elif line.strip().startswith("LOC"):
            columns = line.split()[1:]
        elif re.match(r"^[0-9a-f]{16} ", line):
            cells = _CELL.findall(line)
            row = dict(zip(columns, cells[1:]))
            if current is not None:
                current.rows.append((int(cells[0], 16), row))
            elif cie_at is not None:
                cie_rows[cie_at] = row
    return ReadelfFrames(fdes, cie_rows)


def describe_row(row: Row) -> dict[str, str]:
    """Our decoded row in readelf's notation, for the columns readelf can print."""
    kind, reg, arg = row.cfa
    cells = {"CFA": f"{DWARF_REG_NAMES[reg]}{arg:+d}" if kind == CfaKind.REGISTER else "exp"}
    for name, number in COLUMN_NUMBERS.items():
        rule = row.registers.get(number)
        cells[name] = _describe_rule(rule) if rule is not None else "u"
    return cells


def _describe_rule(rule: tuple[int, object]) -> str:
    kind, arg = rule
    if kind == RuleKind.OFFSET:
        return f"c{arg:+d}"
    if kind == RuleKind.VAL_OFFSET:
        return f"v{arg:+d}"
    if kind == RuleKind.REGISTER:
        return f"r{arg}"
    return {RuleKind.UNDEFINED: "u", RuleKind.SAME_VALUE: "s", RuleKind.EXPRESSION: "exp"}.get(kind, "vexp")


def normalize(cells: dict[str, str]) -> dict[str, str]:
    """readelf's cells with register rules reduced to ``rN`` and absent columns as ``u``."""
    out = {"CFA": cells["CFA"]}
    for name in COLUMN_NUMBERS:
        cell = cells.get(name, "u")
        out[name] = cell.split(" ")[0]
    return out
