"""Code-object reuse: functions are created and freed in a loop, and their code objects come back at the
same addresses. A frame must never carry the name, file or line of another function."""

from __future__ import annotations

import re
import time

import pytest

from tests.integration.cpython.conftest import attached
from tests.targets.python.interpreters import interpreter_params

SCRIPT = "code_churn.py"
TICKS = 300
NAME = re.compile(r"^f_(\d+)_line_(\d+)$")


@pytest.mark.parametrize("interp", interpreter_params())
def test_reused_code_addresses_are_never_misnamed(interp):
    checked = 0
    with attached(interp, SCRIPT) as t:
        session = t.session
        for _ in range(TICKS):
            for _capture, stack in t.tick():
                for frame in session.frames(stack):
                    info = session.describe(frame)
                    match = NAME.match(info.name)
                    if match is None:
                        continue
                    rnd, line = match.groups()
                    assert info.file == f"<churn-{rnd}>", f"{info.name} reported in {info.file}"
                    assert info.line in (int(line), int(line) + 1, int(line) + 2), f"{info.name} at line {info.line}"
                    checked += 1
            session.refresh()
            time.sleep(0.0005)
        stats = session.codes.stats
    assert checked >= TICKS // 4, f"only {checked} samples landed in a churned function"
    # the test only means something if addresses were really reused while we watched
    assert stats.reused_addresses > 0, f"no code address was reused ({stats})"
