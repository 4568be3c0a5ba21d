"""StackWindow: word reads from the copy of a stack, and from the copy of a thread's own stack beside it."""

from __future__ import annotations

import struct

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
