"""The table of top functions at the end of a recording, when there is nothing to put in it."""

from __future__ import annotations

import pytest

from profiler.cli.status import short_label, top_table
from profiler.config import ExportConfig
from profiler.sampling.session import Session, SessionMeta
from profiler.tree.calltree import command_line


def test_threads_that_slept_through_the_recording_are_explained():
    """A process asleep for the whole recording has no sample at all without --idle (its threads are not
    stopped, and have no stack to count again): 'No samples to show (--idle to include)' sent users to a
    report --idle that was just as empty."""
    session = Session(SessionMeta(pid=7, command=["sleeper"]))
    session.thread_index(7, 7, 1, "sleeper")
    assert top_table(session, ExportConfig()).startswith("No samples: every thread slept for the whole recording")
    session.meta.idle_stacks = True  # recorded with --idle: they would have been stopped and counted
    assert top_table(session, ExportConfig()) == "No samples to show (idle excluded, --idle to include)."


def test_a_command_line_is_one_line_cut_only_when_asked():
    """A ``python -c`` program's newlines broke the status line and dump's header across lines."""
    argv = ["python3", "-c", "import time\nwhile True:\n    time.sleep(1)"]
    assert command_line(argv) == "python3 -c import time while True: time.sleep(1)"
    assert command_line(argv, 16) == "python3 -c im..."


#: a PyTorch kernel's name as the demangler gives it (1,133 characters in a top table before)
TORCH_KERNEL = (
    "void at::internal::invoke_parallel<at::parallel_for<at::native::(anonymous namespace)::cpu_max_pool<float, "
    "false>(at::Tensor const&, c10::ArrayRef<long>)::{lambda(long, long)#1}>(long, long, long, "
    "at::native::(anonymous namespace)::cpu_max_pool<float, false>(at::Tensor const&, c10::ArrayRef<long>)::"
    "{lambda(long, long)#1} const&)::{lambda(long, long)#1}>(long, long, long, at::parallel_for<...>(long, long, "
    "long, at::native::(anonymous namespace)::cpu_max_pool<float, false>(at::Tensor const&)::{lambda(long, long)#1}"
    " const&)::{lambda(long, long)#1} const&)._omp_fn.0 (libtorch_cpu.so)"
)


@pytest.mark.parametrize(
    "label, short",
    [
        (TORCH_KERNEL, "void at::internal::invoke_parallel<…>(…)._omp_fn.0 (libtorch_cpu.so)"),
        ("<module> (app.py:1)", "<module> (app.py:1)"),  # short enough: as it is
        ("outer.<locals>.inner_" + "y" * 90 + " (/src/app.py:12)",
         "outer.<locals>.inner_" + "y" * 61 + "… (/src/app.py:12)"),  # Python's brackets are not templates
        ("std::set<int>::operator<(std::set<int> const&) const" + "_" * 55 + " (libx.so)",
         "std::set<…>::operator<(…) const" + "_" * 55 + " (libx.so)"),
    ],
)
def test_a_long_function_label_is_shortened_for_the_table(label, short):
    assert short_label(label) == short and len(short) <= 100


def test_a_function_named_like_its_module_keeps_the_module_in_its_label():
    """Only an unnamed address ("libz.so.1+0x5d80") already says its module: a function whose name merely
    contains the module's ("spin_leaf" in "spin") was shown without it, beside "worker (spin)" (a sweep)."""
    from profiler.model import FrameInfo
    from profiler.tree.calltree import function_label

    assert function_label(FrameInfo("spin_leaf", module="spin")) == "spin_leaf (spin)"
    assert function_label(FrameInfo("libz.so.1+0x5d80", module="libz.so.1")) == "libz.so.1+0x5d80"
