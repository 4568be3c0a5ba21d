"""Reusing the outer frames of a thread's previous walk.

A sampled thread spends most of its time deep below the same callers: between two samples the innermost
frames change and the outer ones (``main``, the event loop, the interpreter's entry, a recursion's upper
levels) do not. Walking those again costs ~1.5 us a frame in Python, most of a sample's unwind.

A walk is deterministic. Each iteration of ``NativeUnwinder`` starts from a state (the registers, the
method that produced the frame, whether its pc is looked up as is) and reads only words of the copied stack;
everything else it consults (the modules mapped, their tables, the code of their functions) is the same
while the address space's ``generation`` is. So if this walk reaches a state the previous walk also
passed through (the same stack pointer, every register equal), and every word the previous walk read from
there on reads the same in this copy, the previous walk's frames from there on are this walk's frames.
The words are checked one by one (``LoggedWindow`` keeps each read's place and value), not the whole
stack above the frame: the locals of outer frames change all the time, their saved registers and return
addresses do not.

The previous walk's last iteration, the one that ended it, is not reused but run again: it may have
stopped at the end of a window that this copy extends, or at a depth limit this walk reaches later.
"""

from __future__ import annotations

from itertools import repeat
from operator import add, itemgetter

from profiler.model import NativeFrame
from profiler.unwind.stack import StackWindow

#: (registers, method, exact): where one iteration of a walk starts (``policy.NativeUnwinder.unwind``)
WalkState = tuple[list, object, bool]
#: take-overs tried per walk: each that fails costs a pass over reads up to the first changed one, and one
#: fails only when a word changed without changing the state after it (a stack scan passing over it)
MAX_ATTEMPTS = 3


class LoggedWindow(StackWindow):
    """A ``StackWindow`` that notes every word read from it, in order, for a later copy to be checked
    against: the word ``offsets[i]`` read as ``values[i]``, where ``offsets[i]`` counts words from the end
    of the copy (-1 is its last word). A read outside the copy, or not aligned to a word, is noted as
    (-1, None), which never checks out. Only an aligned window without a second copy is logged
    (``loggable``).

    Counting from the end makes the indices of one thread's reads the same from copy to copy, as a copy
    ends where its thread's stack does unless the stack is deeper than the window: a later copy is then
    indexed with them as they are, in C (``operator.itemgetter``), with no arithmetic per word."""

    __slots__ = ("offsets", "values")

    def __init__(self, window: StackWindow) -> None:  # pylint: disable=super-init-not-called
        self.base, self.end, self.full, self.home = window.base, window.end, window.full, None
        self._bytes, self.words = window._bytes, window.words
        self.offsets: list[int] = []
        self.values: list[int | None] = []

    def read(self, addr: int) -> int | None:
        off = addr - self.base
        if off < 0 or addr + 8 > self.end or off & 7:
            self.offsets.append(-1)
            self.values.append(None)
            return StackWindow.read(self, addr) if off & 7 else None
        value = self.words[off >> 3]  # type: ignore[index]
        self.offsets.append((addr - self.end) >> 3)
        self.values.append(value)
        return value  # type: ignore[no-any-return]


def loggable(window: StackWindow) -> bool:
    """Reads from ``window`` can be logged and checked against a later copy: it is 8-aligned (word reads
    index it directly) and has no second copy of the thread's own stack (a handler on an alternate signal
    stack: rare, and walked in full)."""
    return window.words is not None and window.home is None


class WalkHistory:
    """One thread's previous walk, kept between its samples: the state each iteration started from, where
    its reads began in the log, the log, and the frames. Owned by the caller (one per thread), written by
    the unwinder after each walk it logged. ``frames`` is the list the walk returned: nobody changes it."""

    __slots__ = ("generation", "end", "states", "sps", "marks", "offsets", "values", "frames", "scanned")

    generation: int  #: ``AddressSpace.generation`` the walk was made in (-1: none kept)
    states: list[WalkState]
    sps: list[int]  #: per iteration, its stack pointer
    marks: list[int]  #: per iteration, the index of its first read in ``offsets``
    offsets: list[int]  #: the words read, counted from ``end`` (``LoggedWindow``)
    values: list[int | None]
    frames: list[NativeFrame]

    def __init__(self) -> None:
        self.end = 0  #: where the copy it read ended
        self.scanned = False  #: a frame was found by a stack scan (the session counts them per sample)
        self.forget()

    def forget(self) -> None:
        """No walk to take over (and none kept in memory: the thread may be gone)."""
        self.generation = -1
        self.states, self.sps, self.marks, self.offsets, self.values, self.frames = [], [], [], [], [], []

    def keep(
        self, generation: int, states: list[WalkState], sps: list[int], marks: list[int], window: LoggedWindow,
        frames: list[NativeFrame], scanned: bool,
    ) -> None:
        """Remember a walk, made in ``generation``, for the thread's next one."""
        self.generation = generation
        self.states, self.sps, self.marks, self.frames, self.scanned = states, sps, marks, frames, scanned
        self.end, self.offsets, self.values = window.end, window.offsets, window.values

    def reads_match(self, window: StackWindow, first: int, last: int) -> bool:
        """Every word iterations ``first`` to ``last - 1`` read is inside ``window`` and holds the value it
        held then. Fetched with ``itemgetter`` over the copy: 2.4 us for 100 words, where a Python loop
        took 22 us and a ``map`` with an address subtraction 12 us, as long as the walk it would save."""
        words = window.words
        assert words is not None
        lo, hi = self.marks[first], self.marks[last]
        if hi - lo < 2:
            return hi == lo or _word(words, self.offsets[lo] + _shift(self.end, window.end)) == self.values[lo]
        index = self.offsets[lo:hi]
        shift = _shift(self.end, window.end)
        if shift < 0:  # this copy ends that many words above the last one: leave them out
            words = words[:shift]
        elif shift > 0:  # ... below it: count from its end, and leave out words above it
            index = list(map(add, index, repeat(shift)))
            if max(index) >= 0:
                return False
        try:
            return itemgetter(*index)(words) == tuple(self.values[lo:hi])  # type: ignore[no-any-return]
        except IndexError:  # a word below this copy
            return False


def _shift(last_end: int, end: int) -> int:
    """What to add to an index counted from ``last_end`` to count it from ``end``."""
    return (last_end - end) >> 3


def _word(words: memoryview, index: int) -> int | None:
    """The word ``index`` counts from the end of ``words`` (None: outside)."""
    return words[index] if -len(words) <= index < 0 else None


class Walk:
    """The states and read positions of the walk in progress, and the previous walk it may take over
    (``prev``, None once it was taken over or tried ``MAX_ATTEMPTS`` times)."""

    __slots__ = ("states", "sps", "marks", "prev", "attempts", "cursor")

    def __init__(self, prev: WalkHistory | None) -> None:
        self.states: list[WalkState] = []
        self.sps: list[int] = []
        self.marks: list[int] = []
        self.prev = prev
        self.attempts = 0
        self.cursor = 0  #: the previous walk's first iteration not yet passed by this one's stack pointer

    def find(self, prev: WalkHistory, sp: int) -> int | None:
        """The previous walk's iteration, not its last, that started at stack pointer ``sp``. Both walks go
        up the stack, so one cursor over the previous walk's stack pointers serves the whole walk (where
        a signal frame moves a walk down, an iteration may be missed: no frames are taken over there)."""
        sps, i = prev.sps, self.cursor
        n = len(sps) - 1
        while i < n and sps[i] < sp:
            i += 1
        self.cursor = i
        return i if i < n and sps[i] == sp else None

    def note(self, state: WalkState, sp: int, window: LoggedWindow) -> None:
        """An iteration starts at ``state``; its reads will follow those logged so far."""
        self.states.append(state)
        self.sps.append(sp)
        self.marks.append(len(window.offsets))

    def take(self, prev: WalkHistory, first: int, window: LoggedWindow) -> None:
        """Note the previous walk's iterations from ``first`` to its last as this walk's (the last one, to
        be run again, with no reads yet), with the reads of all but the last."""
        lo, hi = prev.marks[first], prev.marks[-1]
        shift = len(window.offsets) - lo
        self.states.extend(prev.states[first:])
        self.sps.extend(prev.sps[first:])
        self.marks.extend([mark + shift for mark in prev.marks[first:]])
        end_shift = _shift(prev.end, window.end)
        offsets = prev.offsets[lo:hi]
        window.offsets.extend(map(add, offsets, repeat(end_shift)) if end_shift else offsets)
        window.values.extend(prev.values[lo:hi])
