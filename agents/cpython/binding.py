"""Which Python thread state each OS thread of a CPython process runs: one ``ThreadSlot`` per thread key.

A stopped thread is matched to its state by a key read without a system call (``ThreadBindings.key``): on
3.11+ ``tstate->native_thread_id``, the thread's tid as its own pid namespace numbers it; before that the
thread's ``pthread_t``, which is its ``fs_base`` and is what ``tstate->thread_id`` holds. The slots are kept
up to date three ways:

* a walk of the interpreters' thread lists (``rescan``), between ticks and at once after the resume of a
  thread not seen before (``WalkSchedule`` says when);
* in the stop of a thread seen for one of its first times, a search among the newest states of the lists
  (``find_new``), where the walk has not seen it yet;
* on 3.11+, adoption of a state whose ``native_thread_id`` is no thread of this process (``adopt``): a
  process forked without ``PyOS_AfterFork_Child`` runs its parent's.

Keys are reused: glibc gives a new thread an exited one's cached stack, and so its ``pthread_t``, and tids
wrap. A slot is therefore bound to the OS thread that first uses it after a walk (``bound_slot``), and a
capture checks the state's own id field against the slot's ``ident`` (``capture.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.cpython.detect import Interpreter
from agents.cpython.scatter import Readv
from agents.cpython.slot import ThreadSlot
from agents.cpython.threads import (
    ThreadMap,
    ThreadStateInfo,
    WalkSchedule,
    find_new_thread_state,
    orphaned_states,
    runs_under,
    walk_thread_states,
)
from profiler.target.process import TargetProcess
from profiler.target.procfs import list_threads, read_status
from profiler.target.ptrace import raw_process_vm_readv

if TYPE_CHECKING:
    from agents.cpython.session import SessionStats

#: host tids remembered with their tid in the target's pid namespace before the memory starts over
MAX_NS_TIDS = 1 << 16


class ThreadBindings:
    """The slots of one CPython process's OS threads, by key, and the walks and searches that keep them."""

    def __init__(
        self,
        process: TargetProcess,
        interpreter: Interpreter,
        native_keys: bool,
        stats: SessionStats,
        readv: Readv = raw_process_vm_readv,
    ) -> None:
        self.process = process
        self.readv = readv  #: how the slots' snapshots read the target (``scatter.Readv``)
        self.interpreter = interpreter
        self.layout = interpreter.layout
        self.stats = stats  #: the session's: ``found_new`` and ``adopted`` are counted here
        self.native_keys = native_keys  #: keyed by ``native_thread_id`` (3.11+), else by ``fs_base``
        #: 3.11+ key thread states by ``native_thread_id``, the tid in the target's own pid namespace: in
        #: another one than nprof's (``unshare -p``, a container), the host tid -> that tid, read once per
        #: thread; None where the two are the same, as they mostly are
        self.ns_tids: dict[int, int] | None = None
        status = read_status(process.pid)
        if native_keys and status is not None and status.ns_pids[-1] != process.pid:
            self.ns_tids = {}
        self.slots: dict[int, ThreadSlot] = {}
        #: 3.11+: thread states whose ``native_thread_id`` is no thread of this process, by their pthread
        #: handle (``adopt``); and the threads that took one over: tid -> that handle
        self.orphaned: dict[int, ThreadStateInfo] = {}
        self.adopted: dict[int, int] = {}
        self.main_tid = process.pid  #: the process's main thread, where the interpreter's first thread state runs
        self.threads = ThreadMap({}, [], [], False)  #: what the last walk of the thread lists found
        self.walks = WalkSchedule()  #: when ``threads`` is walked again

    def rescan(self, now: float) -> None:
        """Walk the thread lists, and bind each key to the state found under it; keep a slot whose state is
        the same (its read plan goes on)."""
        threads = walk_thread_states(self.process.read, self.interpreter.runtime, self.layout)
        self.walks.walked(now, threads.complete, bool(threads.states))
        slots: dict[int, ThreadSlot] = {}
        for key, info in threads.by_key.items():
            slot = slots[key] = self._slot_for(key, info)
            slot.tid = 0  # this walk found the state live under this key: whichever thread has it now
        self.orphaned = self._orphaned_states(threads)
        for tid, handle in list(self.adopted.items()):
            orphan = self.orphaned.get(handle)
            if orphan is None:
                del self.adopted[tid]
            elif tid not in slots:  # (a thread whose own state this walk found keeps it)
                slots[tid] = self._slot_for(tid, orphan, orphan.native_thread_id)
        if not threads.complete:
            # a torn walk (the lists changed under it): keep what it could not reach; a capture re-checks
            # every thread state's identity anyway, and the next walk comes soon
            for key, slot in self.slots.items():
                slots.setdefault(key, slot)
        self.slots = slots
        self.threads = threads

    def _orphaned_states(self, threads: ThreadMap) -> dict[int, ThreadStateInfo]:
        """``threads.orphaned_states`` (3.11+) against this process's threads: in a pid namespace of the
        target's own (a container), those whose tid there was learnt (``learn_key``: every thread captured
        once), which a thread's capture does before its state is looked for by its handle."""
        if not self.native_keys or not threads.states:
            return {}
        live = set(self.ns_tids.values()) if self.ns_tids is not None else set(list_threads(self.process.pid))
        return orphaned_states(threads, live)

    def _slot_for(self, key: int, info: ThreadStateInfo, ident: int | None = None) -> ThreadSlot:
        """The slot of ``key`` for the thread state ``info``: the one it has if that is for the same state
        under the same id (its read plan goes on), else a new one (``ident``: ``ThreadSlot.ident``). Thread
        states are freed and allocated at the same few addresses: a slot adopted for another thread's id
        (``adopt``), kept for the state its own thread now has there, checked every capture against the
        other id, and each found the state stale."""
        ident = key if ident is None else ident
        slot = self.slots.get(key)
        if slot is None or slot.info.addr != info.addr or slot.ident != ident:
            return ThreadSlot(key, info, ident, self.readv)
        slot.info = info
        return slot

    def state_of(self, tid: int, fs_base: int = 0) -> ThreadStateInfo | None:
        """The thread state mapped to an OS thread (3.11+ by tid, before by its ``fs_base``)."""
        slot = self.slots.get(self.learn_key(tid) if self.native_keys else fs_base)
        return slot.info if slot is not None else None

    # --- while the thread is stopped ----------------------------------------------------------------------

    def key(self, tid: int, regs: object) -> int | None:
        """What a stopped thread's state is found by (no /proc read: the thread is stopped). 3.11+: its
        ``native_thread_id``, its tid as its own pid namespace numbers it; None when the target has its own
        namespace and the thread was not seen yet (``learn_key`` reads it after resume). Before: its
        pthread_t, which is its ``fs_base``."""
        if not self.native_keys:
            return regs.fs_base  # type: ignore[attr-defined,no-any-return]
        ns_tids = self.ns_tids
        return tid if ns_tids is None else ns_tids.get(tid)

    def bound_slot(self, key: int, tid: int) -> ThreadSlot | None:
        """The slot of ``key`` if it is this OS thread's: the first capture since the last walk binds it to
        its tid, and a capture for another tid means that the thread which had the key exited and a new one
        has it (on <=3.10, its pthread handle: glibc reuses an exited thread's stack, and the handle is an
        address in it), while the slot still holds the old thread's state, freed and maybe still reading as
        its own. Seen on 3.10 in a program that makes a ThreadPoolExecutor of 6 threads for each batch of
        60 jobs: ~7% of its samples showed no Python frames (stale) and 43 (0.3%) garbage ones."""
        slot = self.slots.get(key)
        if slot is None or slot.tid == tid:
            return slot
        if slot.tid:
            return None
        slot.tid = tid
        return slot

    def find_new(self, key: int, tid: int) -> ThreadSlot | None:
        """In the stop of a thread seen for one of its first times, with no thread state in the last walk: its
        state among the newest of the lists (``find_new_thread_state``), bound to it; None if not there.
        Only where the last walk saw a single interpreter: with several, which state runs its code is the
        walk's choice (``walk_thread_states``), and the settle's walk makes it."""
        threads = self.threads
        if len(threads.interpreters) != 1 or not threads.states or not self.walks.may_search(tid):
            return None
        info = find_new_thread_state(self.process.read, threads.interpreters[0], threads.states[0].gil,
                                     self.layout, key)  # fmt: skip
        if info is None:
            return None
        self.stats.found_new += 1
        self.walks.found_new()
        return self._bind(key, info, tid)

    def adopt(self, tid: int, regs: object) -> ThreadSlot | None:
        """In the stop of a thread with no thread state under its tid (3.11+): the orphaned state that has
        its pthread handle (``_orphaned_states``), taken over for it. A process that forks after starting
        the interpreter without ``PyOS_AfterFork_Child`` (uWSGI's master, before its workers run Python)
        leaves the child's main thread running the parent's thread state, with the parent's tid in it: the
        child copied the parent's memory, so the handle, an address of that thread's, is the same. Every
        sample of a uWSGI worker's main thread lacked its Python frames.

        Only a state running a chain under the id it had in the walk is taken (``runs_under``), and only by a
        thread whose own state is not among the newest (``CPythonSession.capture`` looks there first). A
        thread that exited between the walk and the listing of the live threads leaves an orphan too, whose
        handle glibc gives the next thread it starts, with its cached stack: in a thread-per-request program
        (3.12) 2-4 new threads a second took such a state, cleared or already another thread's, kept it
        until the next walk, and showed no Python frames meanwhile (most of the 0-5% of samples in an eval
        loop without)."""
        if not self.orphaned:
            return None
        info = self.orphaned.get(regs.fs_base)  # type: ignore[attr-defined]
        if info is None or not runs_under(self.process.read, info.addr, info.native_thread_id, self.layout):
            return None
        self.stats.adopted += 1
        self.adopted[tid] = info.thread_id
        return self._bind(tid, info, tid, info.native_thread_id)

    def _bind(self, key: int, info: ThreadStateInfo, tid: int, ident: int | None = None) -> ThreadSlot:
        """The slot of ``key`` for ``info`` (``_slot_for``), kept, and bound to OS thread ``tid`` until the
        next walk (``bound_slot``)."""
        slot = self.slots[key] = self._slot_for(key, info, ident)
        slot.tid = tid
        return slot

    # --- after resume ---------------------------------------------------------------------------------

    def learn_key(self, tid: int) -> int:
        """A host tid as its thread state knows it (3.11+), read from /proc once per thread where the target
        has its own pid namespace (``unshare -p``, a container): by its host tid, a Python 3.12 there matched
        none of its thread states, and showed no Python frame. Not while the thread is stopped."""
        ns_tids = self.ns_tids
        if ns_tids is None:
            return tid
        key = ns_tids.get(tid)
        if key is None:
            if len(ns_tids) >= MAX_NS_TIDS:
                ns_tids.clear()
            status = read_status(tid)
            key = ns_tids[tid] = status.ns_pids[-1] if status is not None else tid
        return key
