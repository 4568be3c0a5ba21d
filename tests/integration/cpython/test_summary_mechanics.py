"""The end of a recording's table names CPython's mechanisms, and gives Python self time, on real programs of
every interpreter here (issue 44: a web app's top line was ``__GI___lll_lock_wake``, the GIL changing hands).

Shares are asserted from the session file's samples (``function_totals``), the lines' names from the table
the recording printed."""

from __future__ import annotations

import os
import re

import pytest

from profiler.cli.status import MECHANISM_LINE_SHARE
from profiler.config import ExportConfig
from profiler.model import Mechanism
from profiler.profile.session import Session
from profiler.tree.totals import FunctionTotal, function_totals
from tests.support.targets import record, running_target
from tests.targets.python.interpreters import TARGETS, interpreter_params, sid_interpreter_params

INTERPRETERS = interpreter_params()
#: a row of the table: self%, total%, Python self% (or "-"), the function or line
ROW = re.compile(r"^\s+([\d.]+)%\s+([\d.]+)%\s+(?:([\d.]+)%|-)\s+(.+)$")


def recorded(interp, script: str, tmp_path, *extra: str) -> tuple[dict[str, FunctionTotal], int, str]:
    """Record ``script`` for 2 s: its totals by label, its samples, and the table's text."""
    out = str(tmp_path / "out.folded")
    with running_target([interp.path, os.path.join(TARGETS, script)], ready_at=2) as target:
        result = record(target.pid, out, *extra)
    session = Session.load(str(tmp_path / "out.nprof"))
    totals, samples = function_totals(session, ExportConfig(idle="--idle" in extra))
    table = result.stderr[result.stderr.index("Top functions") :]
    return {t.label: t for t in totals}, samples, table


def rows(table: str) -> dict[str, tuple[str, ...]]:
    return {m.group(4): m.groups()[:3] for line in table.splitlines() if (m := ROW.match(line))}


@pytest.mark.parametrize("interp", INTERPRETERS + sid_interpreter_params([(3, 14)], debug_files=False))
def test_threads_taking_turns_at_the_gil_show_its_hand_off_and_its_wait(interp, tmp_path):
    """Four threads spinning in Python and sixteen waking every millisecond: with --idle, most samples wait
    for the GIL in take_gil, and some hand it over (drop_gil's wake-ups). Without the interpreter's static
    names (sid's 3.14 without its debug file), PyEval_RestoreThread and PyEval_SaveThread still say it."""
    by_label, samples, table = recorded(interp, "gil_contention.py", tmp_path, "--idle")
    waiting, handoff = by_label["[waiting for the GIL]"], by_label.get("[GIL hand-off]")
    assert waiting.mechanism is Mechanism.GIL_WAIT
    assert waiting.self_samples >= 0.3 * samples, f"{waiting.self_samples} of {samples} waiting for the GIL"
    # 1.4-5% of the samples on every interpreter with its names (docs/decisions/summary-mechanics.md), but
    # 0.4% (16 of 4032, 3.8) in a run of the whole suite: the scheduling moves it, so a count that says the
    # line is there, not a share; 0.2-0.4% where only PyEval_SaveThread names it (drop_gil, a static
    # function, is in no symbol table then)
    least = 1 if interp.label.endswith("-nodbg") else 5
    assert handoff is not None and handoff.self_samples >= least, f"hand-offs of {samples} samples: {handoff}"
    shown = rows(table)
    assert "[waiting for the GIL]" in shown, table
    # a line is in the table, whatever its rank, from 1% of the samples on
    assert "[GIL hand-off]" in shown or handoff.total_samples < MECHANISM_LINE_SHARE * samples, table
    assert "  [waiting for the GIL]: blocked in take_gil until" in table


@pytest.mark.parametrize("interp", INTERPRETERS)
def test_a_program_collecting_garbage_shows_the_collector_and_its_callers_python_self(interp, tmp_path):
    """``gc.collect()`` in a loop over 200,000 live lists: nearly every sample is the collector's, and the
    function calling it has them all as its Python self time, while its own self is nil."""
    by_label, samples, table = recorded(interp, "gc_loop.py", tmp_path)
    gc_line = by_label["[garbage collection]"]
    assert gc_line.self_samples >= 0.8 * samples, f"{gc_line.self_samples} of {samples} in the collector"
    caller = next(t for label, t in by_label.items() if label.startswith("collect_forever ("))
    assert caller.python_samples >= 0.9 * samples and caller.self_samples <= 0.05 * samples, caller
    shown = rows(table)
    assert shown["[garbage collection]"][2] is None, "a line of native code has no Python self"
    [(_label, (_self, _total, python))] = [(k, v) for k, v in shown.items() if k.startswith("collect_forever (")]
    assert python is not None and float(python) >= 90.0, table
    assert table.splitlines()[1] == "   self%  total%  py-self%  function"


@pytest.mark.parametrize("interp", INTERPRETERS)
def test_a_program_importing_shows_the_import_line(interp, tmp_path):
    """50 small modules imported again and again: finding, reading and unmarshalling them is the import
    line's, importlib's Python frames its Python self; none of importlib's functions has a line of self."""
    by_label, samples, table = recorded(interp, "import_loop.py", tmp_path)
    imports = by_label["[import]"]
    assert imports.self_samples >= 0.8 * samples and imports.python_samples >= 0.8 * samples, imports
    bootstrap = [t for label, t in by_label.items() if "importlib._bootstrap" in label]
    assert bootstrap and all(t.self_samples == t.python_samples == 0 for t in bootstrap), bootstrap
    assert "[import]" in rows(table), table
