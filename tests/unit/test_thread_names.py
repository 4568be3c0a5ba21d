"""How a thread is named (``thread_naming.thread_name``): as the program named it, its process left to the
process's label (issue 44: every Python thread read ``payer (python)``)."""

from __future__ import annotations

import pytest

from profiler.sampling.thread_naming import thread_name


@pytest.mark.parametrize(
    ("runtime", "comm", "process", "name"),
    [
        ("payer", "python", "python", "payer"),  # comm inherited from the process: not the thread's
        ("MainThread", "python3.12", "python3.12", "MainThread"),
        ("ThreadPoolExecutor-0_0", "ThreadPoolExecu", "python3.14", "ThreadPoolExecutor-0_0"),  # 3.14's, cut
        ("payer", "payer", "python3.14", "payer"),
        ("labelled", "os-label", "python", "labelled (os-label)"),  # set by the thread itself: both
        (None, "python", "python", "python"),  # no runtime name (a native thread, _thread's): the kernel's
        (None, "jemalloc_bg_thd", "python", "jemalloc_bg_thd"),
        ("", "worker", "python", "worker"),
    ],
)
def test_a_thread_is_named_as_the_program_named_it(runtime, comm, process, name):
    assert thread_name(runtime, comm, process) == name
