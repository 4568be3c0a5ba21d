"""Which ``PyThreadState`` belongs to which OS thread, found by walking the interpreter and thread lists.

The walk runs between ticks or right after a resume (``WalkSchedule``), never while a thread is stopped,
except the look among the newest states for a thread new since the walk (``find_new_thread_state``). The
lists may change under it: every link is checked, every loop bounded, and a torn walk is redone. Keys:
``native_thread_id`` on 3.11+, the ``pthread_t`` (the thread's ``fs_base``) before. A thread with states in
several interpreters is read in the newest one whose chain holds a frame, with a frame standing for an
older one's frames outward of it (``nested``).
Why, and the cases met: docs/decisions/thread-states.md."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from agents.cpython.layout import Layout, ThreadLayout, fields_struct
from agents.cpython.memory import Read, plausible, read_exact, read_pointer, read_u64

MAX_INTERPRETERS = 64  #: py-spy's and the reference's bound
MAX_THREADS = 4096
#: least time between two walks of the thread lists when captures ask for one (native threads ask each tick)
RESCAN_MIN_INTERVAL = 0.05
#: walk the thread lists at least this often even if every capture found its thread state
RESCAN_MAX_INTERVAL = 1.0
#: OS threads remembered as found without a thread state (so each asks for two prompt walks at most, not
#: one per tick), and as searched for in their stops (so each searches NEW_THREAD_SEARCHES times at most):
#: bounded, and forgotten all at once when full, as a process with this many threads is rare
MAX_UNMAPPED_TIDS = 4096
#: the newest thread states of an interpreter searched, while it is stopped, for a thread seen for the first
#: time (``find_new_thread_state``): a ``process_vm_readv`` of ~3 us each (reference/ptrace-costs.md), once
#: per OS thread, and at most this many for a native thread, which has no state. A new thread's state is at
#: the head, behind those created after it: in a thread-per-request server 1-3
NEW_STATES_SEARCHED = 16
#: searches per OS thread (``WalkSchedule.may_search``)
NEW_THREAD_SEARCHES = 3


@dataclass
class ThreadStateInfo:
    """One thread state as the last walk saw it."""

    addr: int
    interp: int
    thread_id: int  #: pthread_t (== fs_base)
    native_thread_id: int  #: OS tid on 3.11+, 0 before
    gil: int  #: address of the ``struct _gil_runtime_state`` its interpreter uses (3.12+), else 0


@dataclass
class ThreadMap:
    """The result of one walk."""

    by_key: dict[int, ThreadStateInfo]  #: native tid (3.11+) or pthread_t (<=3.10) -> thread state
    states: list[ThreadStateInfo]  #: every thread state, newest first per interpreter
    interpreters: list[int]
    complete: bool  #: False if the walk was cut short (a bad link or a bound)
    #: thread states in ``by_key`` whose OS thread has states in other interpreters too: which one runs its
    #: code may change before the next walk
    shared: frozenset[int] = frozenset()
    #: thread states in ``by_key`` whose OS thread's state in an older interpreter holds frames as well
    nested: frozenset[int] = frozenset()
    #: thread state in ``by_key`` -> its OS thread's state in the newest interpreter, where that one's chain
    #: was empty: the thread runs the chain read until it enters that interpreter's code, and then the chain
    #: read stays as it was at the call, frozen (``CPythonSession.frames`` looks for that)
    newer: dict[int, int] = field(default_factory=dict)


class _LinkedStates:
    """Reads the thread states of an interpreter's list one by one: (next, interp, thread_id[,
    native_thread_id]) in one read and one unpack, taken by position. The walk reads them so between ticks,
    and ``find_new_thread_state`` in a stop."""

    def __init__(self, t: ThreadLayout) -> None:
        fields = {"next": (t.next, "Q"), "interp": (t.interp, "Q"), "thread_id": (t.thread_id, "Q")}
        if t.native_thread_id is not None:
            fields["native"] = (t.native_thread_id, "Q")
        self._unpacker, names = fields_struct(fields)
        self._next, self._interp, self._thread_id = (names.index(n) for n in ("next", "interp", "thread_id"))
        self._native = names.index("native") if "native" in names else None

    def read(self, read: Read, tstate: int, interp: int, gil: int) -> tuple[ThreadStateInfo, int] | None:
        """One thread state of ``interp``'s list and the address of the next (0 at the end); None if it
        cannot be read, no longer points back at ``interp`` (freed, or being unlinked), or links to an
        implausible address."""
        raw = read_exact(read, tstate, self._unpacker.size)
        if raw is None:
            return None
        values = self._unpacker.unpack(raw)
        nxt = values[self._next]
        if values[self._interp] != interp or (nxt and not plausible(nxt)):
            return None
        native = values[self._native] if self._native is not None else 0
        return ThreadStateInfo(tstate, interp, values[self._thread_id], native, gil), nxt


@functools.lru_cache(maxsize=8)
def _linked_states(t: ThreadLayout) -> _LinkedStates:
    """One reader per layout: made once, not per walk or per search."""
    return _LinkedStates(t)


def walk_thread_states(read: Read, runtime: int, layout: Layout) -> ThreadMap:
    """Every interpreter's thread states, keyed the way the capture looks them up."""
    states_of = _linked_states(layout.thread)
    use_native = layout.thread.native_thread_id is not None
    candidates: dict[int, list[ThreadStateInfo]] = {}  #: per key, its states, newest interpreter first
    states: list[ThreadStateInfo] = []
    interpreters: list[int] = []
    seen: set[int] = set()
    complete = True
    interp = read_pointer(read, runtime + layout.runtime.interpreters_head)
    if interp is None:
        return ThreadMap({}, states, interpreters, False)
    while interp:
        if interp in seen or len(interpreters) >= MAX_INTERPRETERS:
            complete = False
            break
        seen.add(interp)
        interpreters.append(interp)
        gil = 0
        if layout.interpreter.ceval_gil is not None:
            gil = read_pointer(read, interp + layout.interpreter.ceval_gil) or 0
        tstate = read_pointer(read, interp + layout.interpreter.threads_head)
        count = 0
        while tstate:
            if tstate in seen or count >= MAX_THREADS:
                complete = False
                break
            seen.add(tstate)
            count += 1
            linked = states_of.read(read, tstate, interp, gil)
            if linked is None:
                complete = False  # unreadable, freed or being unlinked while we walked, or a bad link
                break
            info, tstate = linked
            states.append(info)
            key = info.native_thread_id if use_native else info.thread_id
            if key:  # (0: a state not bound to its OS thread yet)
                candidates.setdefault(key, []).append(info)
        nxt = read_pointer(read, interp + layout.interpreter.next)
        if nxt is None:
            complete = False
            break
        interp = nxt
    by_key: dict[int, ThreadStateInfo] = {}
    shared: set[int] = set()
    nested: set[int] = set()
    newer: dict[int, int] = {}
    for key, infos in candidates.items():
        by_key[key] = infos[0]
        if len(infos) == 1:
            continue
        running = [info for info in infos if runs_under(read, info.addr, key, layout)]
        chosen = by_key[key] = running[0] if running else infos[0]
        shared.add(chosen.addr)
        if any(info.interp != chosen.interp for info in running[1:]):  # (not a stale state of the same one)
            nested.add(chosen.addr)
        if chosen is not infos[0] and infos[0].interp != chosen.interp:
            newer[chosen.addr] = infos[0].addr
    return ThreadMap(by_key, states, interpreters, complete, frozenset(shared), frozenset(nested), newer)


def find_new_thread_state(read: Read, interp: int, gil: int, layout: Layout, key: int) -> ThreadStateInfo | None:
    """The thread state of an OS thread seen for the first time, looked up while it is stopped, among the
    NEW_STATES_SEARCHED newest states of ``interp`` (a new state is linked at the head of its interpreter's
    list): the newest with its key; None if there is none.

    A thread that lives a few ms, as a thread-per-request server's do, has often exited by the time the
    walk after resume looks for it (``CPythonSession.settle``), and its sample kept no Python frame: 5-10% of
    the samples in an eval loop of ``socketserver.ThreadingMixIn`` on 3.11-3.13, 23-25% on 3.8.

    On 3.8-3.10 a new state holds its creating thread's id until the new thread starts (``new_threadstate``
    in Python/pystate.c), so the newest state with a key is not that thread's when its chain is empty:
    None then, and the walk finds its own. On 3.11+ only the thread itself sets its ``native_thread_id``."""
    states_of = _linked_states(layout.thread)
    by_native = layout.thread.native_thread_id is not None
    tstate = read_pointer(read, interp + layout.interpreter.threads_head) or 0
    for _ in range(NEW_STATES_SEARCHED):
        if not tstate:
            return None
        linked = states_of.read(read, tstate, interp, gil)
        if linked is None:
            return None
        info, tstate = linked
        if (info.native_thread_id if by_native else info.thread_id) == key:
            return info if by_native or runs_under(read, info.addr, key, layout) else None
    return None


def runs_under(read: Read, tstate: int, key: int, layout: Layout) -> bool:
    """Whether a thread state's chain holds a frame while the state is still found by ``key``.

    Up to 3.11 a new state holds its creating thread's ids (``new_threadstate``, 3.11's
    ``init_threadstate``, Python/pystate.c) until its own thread sets them, before it runs a frame
    (``t_bootstrap``, 3.11's ``thread_run``, Modules/_threadmodule.c). The walk reads the ids first and the
    chain later, with the target running, so a thread that started in between read as its creator's
    state with a frame: a 3.9 main thread starting a thread a millisecond was mapped to a worker's state in
    4 of 128 walks, and had no Python frames until the next walk. Reading the key again after the chain
    closes the gap, as x86-64 keeps stores in order: a frame is never seen with the id it replaced."""
    if not innermost_frame(read, tstate, layout):
        return False
    return read_u64(read, tstate + layout.thread.key) == key


def innermost_frame(read: Read, tstate: int, layout: Layout) -> int:
    """The address of a thread state's innermost frame; 0 when its chain is empty or cannot be read."""
    t = layout.thread
    frame = read_pointer(read, tstate + t.frame) or 0
    if frame and t.cframe_current_frame is not None:  # 3.11/3.12: through the current _PyCFrame
        frame = read_pointer(read, frame + t.cframe_current_frame) or 0
    return frame


def orphaned_states(threads: ThreadMap, live: set[int]) -> dict[int, ThreadStateInfo]:
    """pthread handle -> thread state, for the states (3.11+) whose ``native_thread_id`` is none of the
    ``live`` threads' ids: made by a thread of the process this one was forked from, where the fork did not
    go through ``PyOS_AfterFork_Child``, which sets it anew. The child's thread has the same handle (it
    copied the parent's memory), which finds the state for it (``ThreadBindings.adopt``)."""
    return {info.thread_id: info for info in threads.states
            if info.native_thread_id and info.native_thread_id not in live and info.thread_id}  # fmt: skip


class WalkSchedule:
    """When the thread lists are walked again: at least every RESCAN_MAX_INTERVAL; within
    RESCAN_MIN_INTERVAL once a capture found a thread without a valid state or a walk was torn; and at once
    (``soon``) for a thread not seen before."""

    def __init__(self) -> None:
        self.walks = 0  #: walks done so far
        self.soon = False  #: a thread not seen before has no thread state: walk right after resume or at refresh
        self._stale = True
        #: the last walk found a thread state: until one does, the interpreter is still starting (``lost``)
        self._found_states = False
        self._last = -1.0
        self._unmapped: dict[int, int] = {}  #: tid -> ``walks`` when it was first found without a state
        self._searched: dict[int, int] = {}  #: tid -> searches for its state in its stops (``may_search``)

    def due(self, now: float) -> bool:
        since = now - self._last
        return self.soon or since >= RESCAN_MAX_INTERVAL or (self._stale and since >= RESCAN_MIN_INTERVAL)

    def walked(self, now: float, complete: bool, found_states: bool = True) -> None:
        """A walk was made at ``now``; a torn one (``complete`` False) asks for another soon. ``found_states``:
        it found any thread state at all."""
        self._last = now
        self.walks += 1
        self.soon = False
        self._stale = not complete
        self._found_states = found_states

    def recheck(self) -> None:
        """A thread with states in several interpreters was found with an empty chain: it may run another
        interpreter's code now, so walk within RESCAN_MIN_INTERVAL."""
        self._stale = True

    def may_search(self, tid: int) -> bool:
        """Whether a stop of an OS thread without a thread state may look for it among the newest states
        (``find_new_thread_state``), and if so counts the search: NEW_THREAD_SEARCHES times per thread. A
        new thread is often first stopped before its state holds its id (in ``t_bootstrap``), and stopped
        next in its Python code: with one search, 5.4% of the samples in an eval loop of a 3.8 thread per
        request had no Python frame. A native thread has no state to find, and stops searching."""
        done = self._searched.get(tid, 0)
        if done >= NEW_THREAD_SEARCHES:
            return False
        if len(self._searched) >= MAX_UNMAPPED_TIDS:
            self._searched.clear()
        self._searched[tid] = done + 1
        return True

    def searches_left(self, tid: int) -> bool:
        """Whether ``may_search`` would let this OS thread search again."""
        return self._searched.get(tid, 0) < NEW_THREAD_SEARCHES

    def found_new(self) -> None:
        """A thread's state was found in its stop, among the newest (``find_new_thread_state``): walk at the
        next refresh, between ticks, so that the threads started with it are mapped there rather than each
        searched for in its own stop. Without it a ThreadPoolExecutor made per batch had 2.5 times as many
        searches as it had had unmapped captures, and held its threads 10-30% longer in all."""
        self.soon = True

    def lost(self, tid: int) -> None:
        """A thread was found without a (valid) thread state. It asks for a walk at once twice at most: right
        after resume (``CPythonSession.settle``, which has an unmapped thread stopped again if the walk finds
        it) or at the next refresh. A new thread's state is on the lists from its first Python instruction
        (the second walk is for one whose state was not bound to it yet at the first), while one still
        without a state after that is a native thread (a BLAS worker), whose captures would otherwise ask
        for a walk every tick. Waiting RESCAN_MIN_INTERVAL instead left the short-lived threads of a
        ThreadPoolExecutor made per batch (3.12, 600 threads in 5 s) without Python frames in 22% of their
        samples. Either way the lists are walked again within RESCAN_MIN_INTERVAL.

        While the last walk found no thread state at all (the interpreter is still starting, and such a walk
        is one read), every such thread asks for a walk at once, and none of those walks
        counts: the main thread's two were spent before its state existed, and the next walk came
        RESCAN_MIN_INTERVAL later, 10-12 samples without Python frames at 200 Hz in 1 of ~10 recordings of
        a command started by nprof."""
        self._stale = True
        if not self._found_states:
            self.soon = True
            return
        first = self._unmapped.setdefault(tid, self.walks)
        if self.walks - first <= 1:  # twice: the first walk may find its state not bound to it yet
            self.soon = True
        if len(self._unmapped) > MAX_UNMAPPED_TIDS:
            self._unmapped.clear()
