"""DWARF call frame information: find it in a file, decode the FDEs a pc needs, compile their rows.

Files to tables, no pids (DESIGN.md section 3). ``profiler.unwind.cfi`` evaluates the compiled rules on a
copied stack.
"""

from __future__ import annotations

from profiler.binary.cfi.expression import Unrecoverable, evaluate
from profiler.binary.cfi.load import load_unwind_table, save_unwind_table
from profiler.binary.cfi.rules import CfaKind, Row, RuleKind, UnwindKind, UnwindRule
from profiler.binary.cfi.table import CfiSource, TableStats, UnwindTable

__all__ = [
    "CfaKind",
    "CfiSource",
    "Row",
    "RuleKind",
    "TableStats",
    "Unrecoverable",
    "UnwindKind",
    "UnwindRule",
    "UnwindTable",
    "evaluate",
    "load_unwind_table",
    "save_unwind_table",
]
