"""Reusing the outer frames of a thread's previous walk.

A walk is deterministic given where each step starts and the stack words it reads, while the code mapped
is the same (``AddressSpace.generation``). So a walk that reaches a state the previous walk passed through
(the same stack pointer, the registers a step can use equal: ``registers_read``) takes over that walk's
frames from there, once every word it read from there on reads the same in this copy (``LoggedWindow``).
Its last iteration is run again. A thread whose walks keep taking over less than they walk
(``MISSES_BEFORE_PAUSE``) walks ``PAUSED_WALKS`` times without a log.
Why, and what it saves: docs/decisions/walk-take-over.md."""

from __future__ import annotations

from itertools import repeat
from operator import add, itemgetter

from profiler.model import NativeFrame, UnwindMethod
from profiler.unwind.stack import StackWindow

#: (registers, method, exact): where one iteration of a walk starts (``policy.NativeUnwinder.unwind``)
WalkState = tuple[list[int | None], UnwindMethod, bool]
#: take-overs tried per walk: each that fails costs a pass over reads up to the first changed one, and one
#: fails only when a word changed without changing the state after it (a stack scan passing over it)
MAX_ATTEMPTS = 3
#: logged walks in a row that took over less than they walked, after which a thread's walks are made without a
#: log (``PAUSED_WALKS`` of them): a thread whose stack changes all the way down between samples (random call
#: paths, a recursion of varying shape) gains little from taking over, and logging every word its walks read
#: cost them ~10% (recording ``benchmarks/c/random_paths.c``: 199-201 us of CPU per sample logged, 173-184
#: without). Not 4: when states still compared every register (``registers_read.RegistersRead.same_state``), 16% of
#: ``gaps_target``'s walks took nothing over, and 4 in a row paused it 8 times in 2 s at 1 kHz; a thread
#: whose walks take over most of the time should not pause on such a run
MISSES_BEFORE_PAUSE = 8
#: walks made without a log once a thread's take-overs stopped paying; then it logs again, to find out
PAUSED_WALKS = 32
#: threads of one process whose last walk is kept for the next to take over; the least recently walked are
#: forgotten beyond it (an exited thread's among them). A walk of a 34-frame C stack keeps ~26 KB (its
#: states, reads and frames, measured with tracemalloc), so a server with thousands of threads stays
#: within ~26 MB
MAX_LOGS = 1024


class LoggedWindow(StackWindow):
    """A ``StackWindow`` that notes every word read from it in its ``WalkLog``, in order, for a later copy to
    be checked against: the word ``offsets[i]`` read as ``values[i]``, where ``offsets[i]`` counts words from the end
    of the copy (-1 is its last word). A read outside the copy, or not aligned to a word, is noted as
    (-1, None), which never checks out. Only an aligned window without a second copy is logged
    (``loggable``).

    Counting from the end makes the indices of one thread's reads the same from copy to copy, as a copy
    ends where its thread's stack does unless the stack is deeper than the window: a later copy is then
    indexed with them as they are, in C (``operator.itemgetter``), with no arithmetic per word."""

    __slots__ = ("offsets", "values")

    def __init__(self, window: StackWindow, log: WalkLog) -> None:  # pylint: disable=super-init-not-called
        self.base, self.end, self.full, self.home = window.base, window.end, window.full, None
        self._bytes, self.words = window._bytes, window.words
        self.offsets, self.values = log.offsets, log.values  # the log's own lists: appended to here

    def read(self, addr: int) -> int | None:
        off = addr - self.base
        if off < 0 or addr + 8 > self.end or off & 7:
            self.offsets.append(-1)
            self.values.append(None)
            return StackWindow.read(self, addr) if off & 7 else None
        value = self.words[off >> 3]  # type: ignore[index]
        self.offsets.append((addr - self.end) >> 3)
        self.values.append(value)
        return value


def loggable(window: StackWindow) -> bool:
    """Reads from ``window`` can be logged and checked against a later copy: it is 8-aligned (word reads
    index it directly) and has no second copy of the thread's own stack (a handler on an alternate signal
    stack: rare, and walked in full)."""
    return window.words is not None and window.home is None


class WalkLog:
    """One walk as the thread's next walk needs it, filled in as it goes: the state each iteration started
    from and its stack pointer, where its reads start in the log, the log (``LoggedWindow``), the frames
    (the list the walk returned: nobody changes it), and the ``AddressSpace.generation`` it was made in."""

    __slots__ = ("generation", "end", "states", "sps", "marks", "offsets", "values", "frames", "scanned", "misses",
                 "paused")  # fmt: skip

    def __init__(self, generation: int, end: int) -> None:
        self.generation = generation
        self.end = end  #: where the copy it read ended (``offsets`` count from there)
        self.states: list[WalkState] = []
        self.sps: list[int] = []
        self.marks: list[int] = []  #: per iteration, the index of its first read in ``offsets``
        self.offsets: list[int] = []
        self.values: list[int | None] = []
        self.frames: list[NativeFrame] = []
        self.scanned = False  #: a frame was found by a stack scan (the session counts them per sample)
        self.misses = 0  #: logged walks in a row, this one included, that took over less than they walked
        self.paused = 0  #: walks of the thread still to be made without a log (``PAUSED_WALKS``)

    def judge(self, previous: Previous | None, frames: int) -> None:
        """Note whether this walk of ``frames`` frames took over more of ``previous`` than it walked; after
        ``MISSES_BEFORE_PAUSE`` walks in a row that did not, the thread's next walks are not logged."""
        if previous is None:
            return
        self.misses = 0 if 2 * previous.taken >= frames else previous.log.misses + 1
        if self.misses >= MISSES_BEFORE_PAUSE:
            self.misses, self.paused = 0, PAUSED_WALKS

    def note(self, state: WalkState, sp: int) -> None:
        """An iteration starts at ``state``; its reads will follow those logged so far."""
        self.states.append(state)
        self.sps.append(sp)
        self.marks.append(len(self.offsets))

    def take(self, prev: WalkLog, first: int) -> None:
        """Note the previous walk's iterations from ``first`` to its last as this walk's (the last one, to
        be run again, with no reads yet), with the reads of all but the last, and its frames but the last
        iteration's."""
        lo, hi = prev.marks[first], prev.marks[-1]
        shift = len(self.offsets) - lo
        self.states.extend(prev.states[first:])
        self.sps.extend(prev.sps[first:])
        self.marks.extend([mark + shift for mark in prev.marks[first:]])
        end_shift = _shift(prev.end, self.end)
        offsets = prev.offsets[lo:hi]
        self.offsets.extend(map(add, offsets, repeat(end_shift)) if end_shift else offsets)
        self.values.extend(prev.values[lo:hi])
        self.frames.extend(prev.frames[first : len(prev.states) - 1])

    def reads_match(self, window: StackWindow, first: int, last: int) -> bool:
        """Every word iterations ``first`` to ``last - 1`` read is inside ``window`` and holds the value it
        held then. Fetched with ``itemgetter`` over the copy: 2.4 us for 100 words, where a Python loop
        took 22 us and a ``map`` with an address subtraction 12 us, as long as the walk it would save."""
        words = window.words
        assert words is not None
        lo, hi = self.marks[first], self.marks[last]
        shift = _shift(self.end, window.end)
        if hi - lo < 2:
            return hi == lo or _word(words, self.offsets[lo] + shift) == self.values[lo]
        index = self.offsets[lo:hi]
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


class Previous:
    """The previous walk as the walk in progress looks for a state to take it over at."""

    __slots__ = ("log", "cursor", "attempts", "taken")

    def __init__(self, log: WalkLog) -> None:
        self.log = log
        self.cursor = 0  #: the previous walk's first iteration not yet passed by this one's stack pointer
        self.attempts = 0  #: take-overs tried (``MAX_ATTEMPTS``)
        self.taken = 0  #: frames taken over from it

    def find(self, sp: int) -> int | None:
        """The previous walk's iteration, not its last, that started at stack pointer ``sp``, while
        attempts are left. Both walks go up the stack, so one cursor over the previous walk's stack
        pointers serves the whole walk (where a signal frame moves a walk down, an iteration may be missed:
        no frames are taken over there)."""
        if self.attempts >= MAX_ATTEMPTS:
            return None
        sps, i = self.log.sps, self.cursor
        n = len(sps) - 1
        while i < n and sps[i] < sp:
            i += 1
        self.cursor = i
        return i if i < n and sps[i] == sp else None
