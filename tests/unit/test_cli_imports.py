"""The command line imports no engine until a command's arguments and target are checked
(``profiler/cli/engine.py``): a usage error or a wrong pid is answered in the time Python starts, and numpy
is first imported with SIGCHLD blocked, as the tracer needs (``engine.load_engine``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "elftools", "capstone", "ptrace", "profiler.sampling.sampler", "profiler.profile.session")

CHECK = """
import sys
from profiler.cli.main import build_parser, main
build_parser()
code = main(sys.argv[1:]) if len(sys.argv) > 1 else 0
print(code, ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def _imported(*argv: str) -> tuple[int, list[str]]:
    result = subprocess.run([sys.executable, "-c", CHECK.format(heavy=HEAVY), *argv], capture_output=True,
                            text=True, check=True)  # fmt: skip
    code, _, modules = result.stdout.strip().partition(" ")
    return int(code), [m for m in modules.split(",") if m]


@pytest.mark.parametrize(
    "argv, code",
    [((), 0), (("record", "--pid", "999999999"), 3), (("dump", "--pid", "999999999"), 3), (("dump", "--pid", "2"), 3),
     (("record", "--pid", "1", "-r", "0"), 2), (("record",), 2)],
    ids=["parser", "record-no-such-pid", "dump-no-such-pid", "dump-kernel-thread", "record-bad-rate", "no-target"],
)  # fmt: skip
def test_errors_before_the_engine_import_nothing_heavy(argv, code):
    assert _imported(*argv) == (code, [])


def test_the_engine_is_imported_with_numpy_first_under_sigchld_blocked(monkeypatch):
    """``load_engine`` imports numpy inside ``sigchld_blocked``: a BLAS worker thread started outside it
    would take SIGCHLD, which the tracer waits for with sigtimedwait."""
    from profiler.cli import engine
    from profiler.target import events

    blocked: list[bool] = []
    real = events.sigchld_blocked

    def watched(*args, **kwargs):
        blocked.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(events, "sigchld_blocked", watched)
    assert engine.load_engine("profiler.cli.recording").__name__ == "profiler.cli.recording"
    assert blocked == [True]
