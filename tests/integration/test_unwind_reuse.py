"""Taking over the outer frames of a thread's previous walk (``unwind/reuse.py``) against walking from
scratch, on copies of real threads: C without frame pointers (a deep recursion that changes under the
sampled leaf), C++ with exceptions, a kernel only a stack scan can step, threads, and CPython 3.12.

Each copy is walked twice by one unwinder: with the thread's history and without. Both must give the same
frames and stop reason, every time; and the take-over must have happened in most walks, or the
test says nothing. So every walk here is logged: whether a thread's take-overs pay, and its logs pause when
they do not (``reuse.MISSES_BEFORE_PAUSE``), is a cost decision, unit-tested on its own. With the pause,
the C++ sort's ~9-frame walks, which take over a third of their frames, pause for 32 walks of every 40
(a logged walk there costs 14 us against 10 us from scratch), and too few take-overs would be checked."""

from __future__ import annotations

import time

import pytest

from profiler.binary.cache import TableCache
from profiler.binary.objfile import ObjectFileCache
from profiler.sampling.stacks import dwarf_registers
from profiler.target.process import TargetProcess
from profiler.target.tracer import Tracer
from profiler.unwind import reuse
from profiler.unwind.address_space import AddressSpace
from profiler.unwind.policy import NativeUnwinder
from profiler.unwind.stack import StackWindow
from tests.integration.test_record_cfi import DEPTH
from tests.support.targets import running_target
from tests.targets.python.interpreters import TARGETS, pyenv_interpreter

TICKS = 300


@pytest.fixture(autouse=True)
def every_walk_logged(monkeypatch) -> None:
    """No thread's logs pause, so that every walk after the first tries to take over (module docstring)."""
    monkeypatch.setattr(reuse, "MISSES_BEFORE_PAUSE", 1 << 30)


def compare_walks(argv: list[str], ready_at: int = 1) -> tuple[int, int]:
    """(walks whose frames were taken over in part, walks) over ``TICKS`` captures of every thread of
    ``argv``, 2 ms apart; asserts each walk equals the walk from scratch."""
    took = walks = 0
    with running_target(argv, ready_at=ready_at) as target:
        tracer = Tracer()
        try:
            process = TargetProcess(target.pid)
            tracer.add_process(process)
            space = AddressSpace(process, ObjectFileCache(TableCache("cfi", enabled=False)))
            unwinder = NativeUnwinder(space)
            last: dict[int, set[int]] = {}
            for _ in range(TICKS):
                for c in tracer.capture(tracer.seized.sync(target.pid)):
                    window = StackWindow(bytes(c.stack), c.stack_base, c.window_full)
                    regs = dwarf_registers(c)
                    tid = c.thread.tid
                    out = unwinder.unwind(regs, window, tid)
                    expect = unwinder.unwind(regs, window)
                    assert list(out.frames) == list(expect.frames) and out.stop == expect.stop, (tid, walks)
                    took += any(id(f) in last.get(tid, ()) for f in out.frames)
                    walks += 1
                    last[tid] = {id(f) for f in out.frames}
                tracer.pump(time.monotonic() + 0.002)
        finally:
            tracer.detach_all()
    return took, walks


@pytest.mark.parametrize(
    "name", ["chain_nofp", "sort_cpp", "asm_kernels", "threads_fp"]
)
def test_native_walks_taken_over_equal_walks_from_scratch(name, request):
    binary = request.getfixturevalue(name)
    argv = {
        "chain_nofp": [binary, str(DEPTH)],
        "asm_kernels": [binary, "opaque"],
    }.get(name, [binary])
    took, walks = compare_walks(argv)
    assert walks >= TICKS and took >= 0.5 * walks, (took, walks)


def test_python_walks_taken_over_equal_walks_from_scratch():
    python = pyenv_interpreter((3, 12))
    if python is None:
        pytest.skip("no CPython 3.12 under pyenv")
    took, walks = compare_walks([python.path, f"{TARGETS}/chain.py"], ready_at=2)
    assert walks >= TICKS and took >= 0.5 * walks, (took, walks)
