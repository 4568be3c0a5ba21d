"""StackWindow: word reads from the copy of a stack, and from the copy of a thread's own stack beside it."""

from __future__ import annotations

import os
import struct
import threading
import time
from types import SimpleNamespace

from profiler.config import SamplerConfig
from profiler.profile.session import Session, SessionMeta
from profiler.sampling.stacks import StackRecorder
from profiler.target.capture import SeizedThread
from profiler.target.maps import Mapping, MappingIndex
from profiler.target.procfs import ThreadProc
from profiler.unwind.stack import StackWindow


def words(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def test_reads_inside_the_copy_only():
    window = StackWindow(words(1, 2, 3), 0x1000, full=True)
    assert [window.read(0x1000), window.read(0x1008), window.read(0x1010)] == [1, 2, 3]
    assert window.read(0xFF8) is None and window.read(0x1018) is None
    assert window.read(0x1004) == 2 << 32  # unaligned: the high half of 1, the low half of 2


def test_a_thread_stopped_on_another_stack_reads_its_own_stack_too():
    """A handler on an alternate signal stack: the window is the alternate stack, ``home`` the top of the
    thread's own stack, where the interrupted frames are."""
    home = StackWindow(words(7, 8), 0x7FF0_0000, full=False)
    window = StackWindow(words(1, 2), 0x5000, full=True, home=home)
    assert window.read(0x5008) == 2 and window.read(0x7FF0_0008) == 8
    assert window.contains(0x7FF0_0000) and not window.contains(0x7FF0_0010)
    assert window.read(0x6000) is None and window.end == 0x5010, "the window's own range is unchanged"


class _Process:
    def __init__(self, mappings: list) -> None:
        self.maps = MappingIndex(mappings)

    def refresh_maps(self) -> MappingIndex:
        return self.maps


def test_a_thread_s_own_stack_follows_it_as_it_grows_down():
    """The main thread's [stack] grows down: a deeper rsp is still on the thread's own stack, so its stops
    do not copy the top of it a second time (373 of 643 stops of a recursing program did, before)."""
    recorder = StackRecorder(Session(SessionMeta(pid=1, command=["prog"])), SamplerConfig())
    record = SeizedThread(1, 1, 1, "main", proc=None)  # type: ignore[arg-type]
    target = SimpleNamespace(process=_Process([Mapping(0x7000, 0x9000, "rw-p", 0, 0, "[stack]")]))
    recorder._track_stack_mapping(target, record, 0x8000)  # type: ignore[arg-type]
    assert (record.home_lo, record.home_hi) == (0x7000, 0x9000)
    target.process = _Process([Mapping(0x3000, 0x4000, "rw-p", 0, 0, ""),  # an alternate signal stack
                               Mapping(0x6000, 0x9000, "rw-p", 0, 0, "[stack]")])  # fmt: skip
    recorder._track_stack_mapping(target, record, 0x6100)
    assert (record.home_lo, record.home_hi) == (0x6000, 0x9000), "the same stack, grown"
    recorder._track_stack_mapping(target, record, 0x3800)
    assert (record.home_lo, record.home_hi) == (0x6000, 0x9000), "another stack is not the thread's own"
    assert (record.stack_lo, record.stack_hi) == (0x3000, 0x4000)


def test_a_stack_unmapped_once_its_thread_exited_is_no_error():
    """glibc frees an exited thread's stack (at its join, or into its stack cache): an rsp found in no
    mapping, the maps read again, is an error only while its thread lives (a pool of short-lived threads
    counted one in 7183 samples). The threads are this process's: one joined, and this one."""
    session = Session(SessionMeta(pid=1, command=["prog"]))
    recorder = StackRecorder(session, SamplerConfig())
    target = SimpleNamespace(process=_Process([Mapping(0x7000, 0x9000, "rw-p", 0, 0, "[stack]")]))
    started, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), done.wait()))
    worker.start()
    started.wait()
    assert worker.native_id is not None
    proc = ThreadProc(os.getpid(), worker.native_id)  # opened while it runs, as the tracer does
    done.set()
    worker.join()  # returns a little before the kernel has ended the thread: wait for that too
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/self/task/{worker.native_id}") and time.monotonic() < deadline:
        time.sleep(0.001)
    exited = SeizedThread(os.getpid(), worker.native_id, 1, "worker", proc=proc)
    recorder._track_stack_mapping(target, exited, 0x5000)  # type: ignore[arg-type]
    assert session.counters == {"stack_unmapped_after_exit": 1}
    living = SeizedThread(os.getpid(), threading.get_native_id(), 1, "main",
                          proc=ThreadProc(os.getpid(), threading.get_native_id()))  # fmt: skip
    recorder._track_stack_mapping(target, living, 0x5000)  # type: ignore[arg-type]
    assert session.counters == {"stack_unmapped_after_exit": 1, "stack_outside_mappings": 1}
    proc.close()
    living.proc.close()


def test_a_window_doubles_from_the_first_up_to_the_cap():
    record = SeizedThread(1, 1, 1, "main", proc=None)  # type: ignore[arg-type]
    grown = []
    while record.widen(64 << 10, 1 << 20):
        grown.append(record.stack_window >> 10)
    assert grown == [128, 256, 512, 1024], "four samples cut short from 64 KiB to 1 MiB"
    assert not record.widen(64 << 10, 1 << 20) and record.stack_window == 1 << 20
    odd = SeizedThread(1, 2, 1, "odd", proc=None)  # type: ignore[arg-type]
    assert odd.widen(48 << 10, 64 << 10) and odd.stack_window == 64 << 10, "the last step stops at the cap"
    fixed = SeizedThread(1, 3, 1, "fixed", proc=None)  # type: ignore[arg-type]
    assert not fixed.widen(64 << 10, 64 << 10) and fixed.stack_window == 0, "first == cap: a fixed window"


def test_a_walk_cut_by_the_window_widens_its_thread_s_window_and_one_cut_at_the_cap_is_counted():
    """What the sampler does with a walk that stopped at the end of its window: the thread's next copy
    takes twice as much; once that is the cap, the walk is counted for the end-of-recording notice."""
    session = Session(SessionMeta(pid=1, command=["prog"]))
    recorder = StackRecorder(session, SamplerConfig(stack_bytes=4096, max_stack_bytes=16384))
    record = SeizedThread(1, 1, 1, "main", proc=None)  # type: ignore[arg-type]
    for _ in range(4):
        recorder._widen(record)
    assert record.stack_window == 16384
    assert session.counters == {"stack_windows_widened": 2, "stack_window_at_cap": 2}
