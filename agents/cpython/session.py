"""``CPythonSession``: the agent protocol (``profiler/runtime.py``) for one CPython process.

In the stop, ``snapshot`` only names the thread's read plan (the tracer copies it with the stack window),
and ``capture`` walks the chain where there is no plan; after resume ``settle`` walks a snapshot's bytes as
``capture`` would have, or returns ``RECAPTURE`` when they fall short (a deeper chain, a new code object:
``code_prefetch.py``). ``frames``, ``activations``, ``holds_gil`` and ``locals`` read a capture;
``refresh`` runs between ticks; ``describe`` names a frame at export.
How a sample's stops go, and why: docs/decisions/snapshot-then-settle.md."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from agents.cpython.anchors import InterpreterFunctions, is_call_glue, is_coroutine_base
from agents.cpython.binding import ThreadBindings
from agents.cpython.capture import MAX_FRAMES, CaptureStatus, ChainCopier, StackCapture
from agents.cpython.code import CUT_KEY, OUTER_KEY, SHIM_KEY, CodeCache
from agents.cpython.code_check import HeaderCheck
from agents.cpython.code_prefetch import CodePrefetch
from agents.cpython.detect import Interpreter, interpreter_modules
from agents.cpython.frames import decode_frames
from agents.cpython.locals import LocalsReader
from agents.cpython.marks import ActivationMarks
from agents.cpython.mechanics import InterpreterMechanics, python_mechanism
from agents.cpython.scatter import Readv, ScatterReader
from agents.cpython.slot import ThreadSlot
from agents.cpython.thread_names import ThreadingNames
from agents.cpython.threads import innermost_frame
from profiler.model import FrameInfo, Mechanism, NativeFrame, RuntimeFrame
from profiler.runtime import RECAPTURE, StopCopy
from profiler.target.process import TargetProcess
from profiler.target.ptrace import raw_process_vm_readv
from profiler.unwind.stack import StackWindow

#: how long Python thread names are reused before the next (heavy) read of threading._active
NAMES_MAX_AGE = 2.0
#: a thread missing from the names read has them read again after this long at the soonest: it may have
#: started since (the sampler asks for each new thread's name a few times, every
#: ``thread_naming.NAMING_INTERVAL`` of 0.25 s, so a short-lived thread is named before it exits; shorter than
#: that interval, so that each of its passes reads afresh)
NAMES_MISSING_AGE = 0.2
#: captures of the main thread without a thread state, and none with one, before the end of a recording
#: says Python frames were never read: a few are normal while a fresh interpreter starts up
MAIN_UNMAPPED_NOTICE = 20


@dataclass
class SessionStats:
    captures: int = 0  #: copied and walked in the stop (``capture``)
    unmapped: int = 0  #: captures of a thread with no known Python thread state
    main_unmapped: int = 0  #: of those, captures of the main thread (which runs the interpreter)
    stale: int = 0  #: the mapped thread state belonged to another thread by the time of the stop
    unreadable: int = 0  #: the thread state could not be read
    truncated: int = 0  #: stacks cut short by a looping, unreadable or garbage chain
    #: stacks deeper than ``capture.MAX_FRAMES``: the innermost frames are kept, under a ``CUT_KEY`` frame
    too_deep: int = 0
    #: stacks of a subinterpreter's code run from an older interpreter's, whose frames were not read
    #: (``threads.py``): kept under an ``OUTER_KEY`` frame
    nested: int = 0
    plan_rebuilds: int = 0
    snapshots: int = 0  #: captures copied by ``snapshot`` and walked after resume
    recaptured: int = 0  #: snapshots that missed a byte or a new code object: captured again in a stop
    #: of those, snapshots whose walk met a code object not decoded yet (``code_prefetch.py``): that sample is
    #: taken again later, when the function may have returned
    met_new_code: int = 0
    #: captures and snapshots of a thread entering an eval loop, with no frame to walk yet (3.11/3.12):
    #: captured again in a second stop
    entering: int = 0
    #: unmapped captures of a new thread whose state a walk after resume found: captured again at once
    remapped: int = 0
    #: captures of a thread seen for the first time whose state was found in the stop, among the newest
    #: (``threads.find_new_thread_state``)
    found_new: int = 0
    #: snapshots whose state may be another thread's (``_maybe_anothers``): captured again in a stop that
    #: looks for the thread's own
    not_its_own: int = 0
    #: snapshots captured again because a code object's header, read after resume, no longer held the
    #: identity decoded (freed since the stop, or another object at its address: ``HeaderCheck``)
    code_changed: int = 0
    #: code objects decoded from a second stop's copy of what a snapshot's walk met new (``code_prefetch.py``)
    decoded_ahead: int = 0
    #: threads (3.11+) that took over a thread state made by a thread of another process: a fork without
    #: ``PyOS_AfterFork_Child`` (``ThreadBindings.adopt``)
    adopted: int = 0


class CPythonSession:
    """The agent attached to one CPython process."""

    name = "cpython"

    def __init__(self, process: TargetProcess, interpreter: Interpreter, readv: Readv = raw_process_vm_readv) -> None:
        """``readv``: how the target's memory is read (``scatter.Readv``; a test's fake memory)."""
        self.process = process
        self.interpreter = interpreter
        self.layout = interpreter.layout
        self.stats = SessionStats()
        self._reader = ScatterReader(process.memory_pid, readv=readv)
        process.memory_pid_changed.append(self._read_through)
        self.codes = CodeCache(
            process.read, self.layout.code, self.layout.objects, interpreter.types, read_ranges=self._read_ranges
        )
        self.functions = InterpreterFunctions(interpreter.obj.symbols, interpreter.bias)
        self._marks = ActivationMarks(self.layout)
        self._copier = ChainCopier(self.layout, interpreter.runtime)
        #: which thread state each OS thread runs (``binding.py``)
        self.bindings = ThreadBindings(process, interpreter, self._copier.native_keys, self.stats, readv)
        self._main_mapped = False  #: a capture of the main thread found its thread state (``frames``)
        self._code_adaptive = self.layout.code.code_adaptive or 0
        self._locals: LocalsReader | None = None
        self._names: ThreadingNames | None = None
        self._names_time = -NAMES_MAX_AGE
        self._name_cache: dict[int, str] = {}
        self._mechanics: InterpreterMechanics | None = None  #: made when the frames are named (``mechanism``)
        self._own_modules: frozenset[str] | None = None  #: ``is_interpreter_module``'s, once asked
        self.refresh(force=True)

    @property
    def label(self) -> str:
        """The runtime as the user is told of it: "CPython 3.12 (libpython3.12.so.1.0)"."""
        return self.interpreter.label

    # --- between ticks ----------------------------------------------------------------------------------

    def _read_through(self, pid: int) -> None:
        """The process's memory is read through ``pid`` now (``TargetProcess.memory_pid``: its main thread
        has exited)."""
        self._reader.pid = pid

    def refresh(self, force: bool = False) -> None:
        """Re-walk the thread lists if needed, and rebuild dirty read plans."""
        now = time.monotonic()
        if force or self.bindings.walks.due(now):
            self.bindings.rescan(now)
        for slot in self.bindings.slots.values():
            if slot.pending is not None:
                self._rebuild(slot)

    def _rebuild(self, slot: ThreadSlot) -> None:
        slot.rebuild()
        self.stats.plan_rebuilds += 1

    # --- while the thread is stopped ----------------------------------------------------------------------

    def capture(self, tid: int, regs: object) -> StackCapture:
        """Copy the thread's frame chain (syscalls only). ``UNMAPPED``, with no frames, when no Python thread
        state is known for the thread: ``settle`` looks for one after resume, if it is a new thread."""
        bindings = self.bindings
        key = bindings.key(tid, regs)
        slot = bindings.bound_slot(key, tid) if key is not None else None
        self.stats.captures += 1
        if slot is None and key is not None:  # its own state first: another's is adopted only if it has none
            slot = bindings.find_new(key, tid) or bindings.adopt(tid, regs)
        if slot is None:
            self.stats.unmapped += 1
            # (not a forked child's on its parent's state, idle: ``adopt`` takes that when it runs Python)
            if tid == bindings.main_tid and regs.fs_base not in bindings.orphaned:  # type: ignore[attr-defined]
                self.stats.main_unmapped += 1
            if key is not None:  # (else its key is learnt after resume, ``settle``)
                bindings.walks.lost(tid)
            unmapped = StackCapture(tid, 0, CaptureStatus.UNMAPPED)
            unmapped.key = key
            return unmapped
        out = self._copy(slot, tid)
        if self._maybe_anothers(out) and key is not None:
            fresh = bindings.find_new(key, tid)
            if fresh is not None:
                out = self._copy(fresh, tid)
        if out.status == CaptureStatus.STALE:
            bindings.walks.lost(tid)
        return out

    def _maybe_anothers(self, out: StackCapture) -> bool:
        """Whether the state a capture read may be another thread's, so that its own is looked for among
        the newest (``ThreadBindings.find_new``): it moved on (thread exited, tid reused); or, on <=3.10, its
        chain is empty. There a new thread given an exited one's pthread handle is bound by its first capture
        since the walk to that one's slot, whose state, freed, may still read as the handle's, with an empty
        chain: 1-3% of the samples in an eval loop of a 3.10 thread per request had no Python frame."""
        return out.status == CaptureStatus.STALE or (not out.addrs and not self.bindings.native_keys)

    def _copy(self, slot: ThreadSlot, tid: int) -> StackCapture:
        """The walk of ``capture`` through a stopped thread's slot, and the new code objects it met decoded."""
        if slot.pending is not None:
            self._rebuild(slot)  # the sampler did not decode the previous capture: plan now
        slot.walk_next = False  # this walk decodes whatever it meets new (the slot's ``ahead`` waits on)
        reader = self._reader
        reader.begin(slot.plan)
        out, wanted = self._copier.copy(reader, tid, slot.ident, slot.info)
        slot.note(wanted, reader.misses > 0, reader.unread_range())
        self.codes.decode_new(out)  # new code objects are decoded now, while their frames keep them alive
        return out

    def snapshot(self, tid: int, regs: object) -> ThreadSlot | None:
        """The least copy while the thread is stopped, made by the tracer: the thread's slot, whose
        ``co_read`` (its ``Snapshot``) the tracer fills with the ranges of its read plan in the same
        ``process_vm_readv`` as the stack window; nothing is walked (``settle`` walks them after resume).
        Returns None when there is no plan to copy by (a thread not seen or not captured before, a plan not
        rebuilt yet, a chain the last snapshot found grown past its plan): the sampler calls ``capture`` in
        the same stop then. When the thread's last snapshots met code objects not decoded yet, the same
        ``process_vm_readv`` copies what their decode reads too (``CodePrefetch``; one more where they do not fit
        it).

        A newest frame the plan lacks (a call's new frame object on 3.8-3.10, a generator's frame on 3.11+)
        is found by the walk after resume, and costs a second stop: looking for it here cost every stop
        2-4 us (2% of the stops of a pytest run on 3.11 and of a request mix on 3.10 lacked it)."""
        bindings = self.bindings
        key = bindings.key(tid, regs)
        slot = bindings.bound_slot(key, tid) if key is not None else None
        if slot is None or slot.pending is not None or slot.walk_next:
            return None
        snap = slot.snap
        if not snap.plan.count:
            return None
        snap.tid, snap.done = tid, 0  # nothing is copied until the tracer's read
        ahead = slot.ahead  # new code objects its last snapshots met (``code_prefetch.py``)
        if ahead is not None and snap.extra is not ahead.snap:
            ahead.take(tid)  # (attached, the tracer's read copies it with the plan, and sets its ``done``)
        return slot

    def settle(self, data: StopCopy) -> StopCopy | None:
        """After resume: what ``capture`` would have returned in the stop of a ``snapshot``, worked out from
        its bytes alone; ``RECAPTURE`` when they do not hold everything. A capture made in the stop comes
        back unchanged, unless it found the thread entering an eval loop (``TRUNCATED_ENTERING``) or without a
        thread state that a walk of the thread lists made now finds (``UNMAPPED``): ``RECAPTURE`` too.

        A walk over a snapshot sees exactly what a walk during that stop would have seen, as long as it
        needs no byte outside the plan: every planned byte was copied in the stop. It needs more when the
        chain grew past the plan (a deeper stack, a new frame object). The sampler then stops the thread
        again at once, and its ``snapshot`` hands the stop to ``capture``, which walks. Plans keep the
        ranges of earlier captures (``plan.next_ranges``) and, on 3.11+, the rest of the newest frame's
        page (``ChainCopier.copy``), so that is rare: 0-0.5% of the captures of a recursive fib(22)
        recorded at 1 kHz (3.8-3.13), none of a steady chain.

        Plans hold no code-object headers: the walk's code objects are identified here, after resume, from
        their headers read now with one ``process_vm_readv`` (``_identify_codes``), which is as sure as
        the stop's own check of a known object (``HeaderCheck``). A code object not decoded yet, or
        no longer under the identity decoded, needs a stop too: a new one must be decoded from bytes copied
        while its frame keeps it alive (``code.py``). Its header and strings are read once now, to learn
        their ranges, and the next stop's snapshot copies them again: its settle decodes from that copy
        the code objects its walk meets (``code_prefetch.py``). The headers were most of a deep stack's
        snapshot: in a recording of pytest on 3.11 its median was 49 ranges, copied in 41 µs, and is 6
        ranges and 16 µs without them."""
        if not isinstance(data, ThreadSlot):
            if not isinstance(data, StackCapture):
                return data
            if data.status == CaptureStatus.TRUNCATED_ENTERING:
                self.stats.entering += 1
                return RECAPTURE  # captured in the stop, a few instructions into an eval loop's entry
            if data.status == CaptureStatus.UNMAPPED:
                # a thread not seen before: walk the thread lists now (once for all such captures of a
                # tick), with every thread running, and if its state is there, stop it again to capture it
                # with its Python frames. In another pid namespace, its key is learnt now, its first time
                if data.key is None:
                    data.key = self.bindings.learn_key(data.tid)
                if self.bindings.walks.soon:
                    self.bindings.rescan(time.monotonic())
                if self.bindings.bound_slot(data.key, data.tid) is not None:
                    self.stats.remapped += 1
                    return RECAPTURE
            return data
        snap, reader = data.snap, self._reader
        ahead = data.ahead  # kept on the slot while the copy is not settled (a second stop, or a walk in full)
        reader.replay(snap)
        try:
            out, wanted = self._copier.copy(reader, snap.tid, data.ident, data.info)
            missed = reader.missed
            unread = reader.unread_range() if missed is not None else None
        finally:
            reader.end_replay()
        if out.status == CaptureStatus.TRUNCATED_ENTERING:
            # stopped a few instructions into an eval loop's entry, with nothing to walk yet: a second
            # stop finds it past them (``ChainCopier._check_enclosing``)
            self.stats.entering += 1
            return RECAPTURE
        if missed is not None:
            self.stats.recaptured += 1
            data.walk_next = True  # the chain grew past the plan: the next stop walks it
            if wanted is not None:
                # and the thread's plans copy from now on the range it needed, which that stop's walk in
                # full will not see if the call that needed it has returned by then (a short call's frame)
                fixed, rest = wanted
                data.note((fixed, [missed, *rest]), True, unread)
                self._rebuild(data)
            return RECAPTURE
        if self._maybe_anothers(out) and self.bindings.walks.searches_left(snap.tid):
            # a second stop captures it, and looks for its own state: with walks made as soon as a new
            # thread was found, 5-10% of a 3.8/3.10 thread per request's samples read an exited thread's
            self.stats.not_its_own += 1
            data.walk_next = True
            return RECAPTURE
        if ahead is not None:
            self.stats.decoded_ahead += ahead.decode(self.codes, self._codes_met(out))
        confirmed = self._identify_codes(data, out.late_codes)
        if confirmed is None or not self.codes.decode_new(out, decode=False):  # known code objects only
            # a code object not decoded yet, or no longer the one decoded (if the cache knows them all, one
            # of them changed): the next stop copies it too
            self.stats.recaptured += 1
            met = self._codes_met(out)
            unknown = self.codes.unknown(met)
            self.stats.met_new_code += bool(unknown)
            data.ahead = CodePrefetch.of(self.codes, unknown or met, ahead, self._reader.readv)
            data.walk_next = data.ahead is None
            return RECAPTURE
        out.code_keys.update(confirmed)
        self.stats.snapshots += 1
        if ahead is not None:
            data.ahead = ahead.keep(self.codes)  # new code objects this walk did not meet: copied again
        data.note(wanted, False, None)  # counts a clean capture; may cut back a plan grown too large
        if out.status == CaptureStatus.STALE:
            self.bindings.walks.lost(snap.tid)
        return out

    @staticmethod
    def _codes_met(out: StackCapture) -> list[int]:
        """The code objects a walk met, shims' aside (their code is never decoded)."""
        return [code for code, offset in out.code_headers.items() if offset != -2]

    def _read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The code cache's reads of several ranges during a stop (``CodeCache._decode_all``): one scatter
        read, into the reader's buffer after what the capture copied; b"" for a range not read whole."""
        reader = self._reader
        offsets = reader.read_ranges(ranges)
        view = reader.view
        return [bytes(view[off : off + size]) if off >= 0 else b"" for off, (_, size) in zip(offsets, ranges)]

    def _identify_codes(self, slot: ThreadSlot, codes: list[int]) -> dict[int, int] | None:
        """After resume: the keys of the code objects a snapshot's walk met (``codes``, those whose headers
        the snapshot does not hold), from their headers read now with one ``process_vm_readv``; None
        unless each is one the code cache knows, still under the identity decoded (``HeaderCheck``, kept
        in the thread's slot while its stack runs the same code objects). Nothing is read for a code object
        not decoded yet (its capture must be made in a stop)."""
        if not codes:
            return {}
        check = slot.check
        if check is None or check.codes != codes or check.version != self.codes.version:
            check = slot.check = HeaderCheck.of(self.codes, codes, self._copier.code_size)
            if check is None:
                return None
        reader = self._reader
        if not reader.fetch(check.reads) or not check.holds(reader.view):
            self.stats.code_changed += 1
            return None
        return check.keys

    # --- after resume ---------------------------------------------------------------------------------

    def frames(self, capture: StopCopy | None) -> list[RuntimeFrame]:
        """Decode a capture: RuntimeFrames innermost first; a cut-short stack is counted in ``stats``."""
        if not isinstance(capture, StackCapture) or capture.status == CaptureStatus.UNMAPPED:
            return []  # (unmapped: counted in the stop)
        if capture.tid == self.bindings.main_tid:
            self._main_mapped = True  # noted here, after resume, rather than in the stop
        status = capture.status
        if status == CaptureStatus.TRUNCATED_DEPTH:
            self.stats.too_deep += 1
        elif status.truncated:
            self.stats.truncated += 1
        elif status:
            if status == CaptureStatus.STALE:
                self.stats.stale += 1
            else:
                self.stats.unreadable += 1
            return []
        sources: list[int] = []
        frames, cut = decode_frames(capture, self.layout.frame, self._code_adaptive, self.codes.by_key, sources)
        if cut and not status.truncated:
            self.stats.truncated += 1
        elif status == CaptureStatus.TRUNCATED_DEPTH and not cut:
            frames.append(RuntimeFrame(CUT_KEY, -1, False))  # the outermost: what was not read is outward
        threads = self.bindings.threads
        if capture.tstate in threads.shared:  # a thread with states in several interpreters
            newer = threads.newer.get(capture.tstate)
            if newer and innermost_frame(self.process.read, newer, self.layout):
                # it has entered a newer interpreter's code (run_string) since the walk: its chain here is
                # frozen at the call, and stays so for as long as that code runs. Walk before the next tick:
                # left to the periodic walk, the sub-interpreter's code was charged to its caller for up to a
                # second (90-97% of its samples, calls of 0.1 s on 3.12 and 3.13)
                self.bindings.walks.soon = True
            if not frames:
                self.bindings.walks.recheck()  # it may run another interpreter's code now
            elif capture.tstate in threads.nested:
                # an older interpreter's frames run outward of these, in eval loops of their own (one per
                # frame up to 3.10): a group stands for them, so that this chain's groups pair with their
                # own eval loops
                frames[-1] = frames[-1]._replace(entry=True)
                frames.append(RuntimeFrame(OUTER_KEY, -1, True, rest=True))
                self.stats.nested += 1
        capture.decoded = (frames, sources)
        return frames

    def activations(self, capture: StopCopy | None, stack: StackWindow) -> list[int]:
        """After ``frames(capture)``, which it takes the frames of: per group of those frames (innermost
        first, as the merge groups them), the address on the C stack of the record its eval-loop activation
        keeps there, 0 where none is known (``marks.py``); empty before 3.11, where names alone place
        them."""
        if not isinstance(capture, StackCapture) or capture.decoded is None or not self._marks.known:
            return []
        frames, sources = capture.decoded
        return self._marks.of(capture, frames, sources, stack)

    def locals(self, capture: StopCopy | None) -> list[list[tuple[str, str]]]:
        """(name, value text) of each Python frame's bound locals: one entry per frame of ``frames(capture)``
        that is Python code (shims left out), in that order, as a stack shows them. Indexed by the captured
        frames instead, every frame above a shim got the locals of the frame it called (3.12+: a Python
        function called from C, and every call under ``-X perf``).

        For ``nprof dump --locals``: it reads the frames' memory, so call it while the thread is still
        stopped (after ``capture``); each frame and value is bounded (``locals.py``, ``objects.py``)."""
        if not isinstance(capture, StackCapture) or capture.status == CaptureStatus.UNMAPPED:
            return []
        if self._locals is None:
            self._locals = LocalsReader(self.process.read, self.layout, self.interpreter.types)
        sources: list[int] = []
        frames, _cut = decode_frames(capture, self.layout.frame, self._code_adaptive, self.codes.by_key,
                                     sources)  # fmt: skip
        return self._locals.capture_locals(capture, [i for f, i in zip(frames, sources) if not f.shim])

    def python_thread_names(self, max_age: float = NAMES_MAX_AGE, since: float = 0.0) -> dict[int, str]:
        """``{thread ident: threading name}`` (ident = ``thread_id`` = pthread_t), re-read at most every
        ``max_age`` seconds (it is a heavy walk, ``thread_names.py``), and whenever the last reading was
        made before ``since`` (monotonic)."""
        now = time.monotonic()
        if self._names is None:
            self._names = ThreadingNames(self.process.read, self.layout, self.interpreter.types)
        if now - self._names_time >= max_age or self._names_time < since:
            self._names_time = now
            self._name_cache = self._names.read_names(self.bindings.threads.interpreters)
        return self._name_cache

    def thread_name(self, tid: int, fs_base: int = 0, alive_since: float = 0.0) -> str | None:
        """The Python name of an OS thread (3.8-3.10 need its ``fs_base`` to find its thread state).

        ``alive_since``: a monotonic time at which the thread was alive. Names read before it are not
        used: its ident may have been an exited thread's then, with that thread's name. A thread takes over
        the pthread_t (its ident) of one that exited before it started whenever glibc hands it that
        thread's cached stack: 7 threads run one after another, each joined before the next, were all
        named after the first of them while a reading was less than ``NAMES_MAX_AGE`` old."""
        info = self.bindings.state_of(tid, fs_base)
        if info is None:
            return None
        ident = info.thread_id
        name = self.python_thread_names(since=alive_since).get(ident)
        return name if name is not None else self.python_thread_names(NAMES_MISSING_AGE, alive_since).get(ident)

    def holds_gil(self, capture: StopCopy | None) -> bool | None:
        """Whether the thread held the GIL at its stop; None if unknown (no thread state, unreadable)."""
        return capture.holds_gil if isinstance(capture, StackCapture) else None

    def describe(self, frame: RuntimeFrame) -> FrameInfo:
        """Name (qualname on 3.11+), file and line of a frame, from the code cache (no target reads)."""
        if frame.shim or frame.code == SHIM_KEY:
            return FrameInfo("<shim>", module=None)
        if frame.code == CUT_KEY:
            return FrameInfo(f"[outer Python frames: the stack is deeper than {MAX_FRAMES}]")
        if frame.code == OUTER_KEY:
            return FrameInfo("[Python frames of an outer interpreter: not read]")
        info = self.codes.get(frame.code)
        if info is None:
            return FrameInfo("<unknown Python code>")
        return FrameInfo(info.name, info.filename, info.line(frame.offset), mechanism=python_mechanism(info.filename),
                         function_file=info.filename, function_line=info.firstlineno or None)  # fmt: skip

    # --- native frames -----------------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """What the session saw that a profile should say (the engine adds these to the session's
        counters): truncated or unmapped stacks, stale thread states, code objects reused or unreadable."""
        out = {}
        for prefix, stats in (("python_stacks", self.stats), ("python_code", self.codes.stats)):
            for name, value in dataclasses.asdict(stats).items():
                if value and name not in ("captures", "decoded", "plan_rebuilds"):
                    out[f"{prefix}_{name}"] = value
        return out

    def notices(self) -> list[str]:
        """What the user must be told at the end: stacks too deep to read whole; and the main thread stopped
        again and again without ever matching a Python thread state, so (unless it runs no Python at all, as
        in a program that embeds the interpreter in another thread) every Python frame is missing from the
        profile."""
        out = []
        if self.stats.too_deep:
            out.append(
                f"{self.interpreter.label}: {self.stats.too_deep} Python stack(s) deeper than {MAX_FRAMES} frames: "
                f"only the innermost {MAX_FRAMES} are read, under a frame named \"[outer Python frames: ...]\""
            )
        if not self._main_mapped and self.stats.main_unmapped >= MAIN_UNMAPPED_NOTICE:
            out.append(
                f"{self.interpreter.label}: the main thread matched none of the "
                f"{len(self.bindings.threads.states)} Python thread states in {self.stats.main_unmapped} captures, "
                "so its Python frames are missing; if it ran Python code, this is a bug in nprof: please report it "
                "with `nprof dump --pid PID --json`"
            )
        return out

    def is_anchor(self, frame: NativeFrame) -> bool:
        """``_PyEval_EvalFrameDefault`` (and its split parts) of this interpreter."""
        return self.functions.is_anchor(frame)

    @property
    def anchors_complete(self) -> bool:
        """The interpreter's symbols name every part of its eval loop (a full symbol table: its own, a
        debug file's or MiniDebugInfo's), so ``is_anchor`` can check a placement by address."""
        return self.functions.complete

    def is_interpreter_frame(self, frame: NativeFrame) -> bool:
        """The eval loop and the call glue between it and a C function (for ``--hide-interpreter``)."""
        return self.functions.is_interpreter_frame(frame)

    def is_interpreter_function(self, name: str) -> bool:
        """The same call glue by name, for its copies inlined into other functions (``--hide-interpreter``):
        ``PyObject_Vectorcall`` inlined into ``builtin_sorted``, ``_PyObject_VectorcallTstate`` into most."""
        return is_call_glue(name)

    def mechanism(self, frame: NativeFrame, name: str) -> Mechanism | None:
        """The interpreter's machinery (GIL, garbage collector, import) that function ``name`` at ``frame``
        is part of, for the summary table (``mechanics.py``)."""
        if self._mechanics is None:
            self._mechanics = InterpreterMechanics(self.interpreter.obj.symbols, self.interpreter.bias)
        return self._mechanics.of(frame.avma, name)

    def is_interpreter_module(self, path: str) -> bool:
        """The interpreter's file (libpython, or a static ``python3.X``), and the executable that runs it when
        that is CPython's launcher (named ``python3.X``, as ``interpreter_mapping`` knows it: Programs/python.c,
        a ``main`` that calls ``Py_BytesMain``), not a program that embeds the interpreter (``--hide-interpreter``:
        ``symbolize/startup.py``)."""
        if self._own_modules is None:
            self._own_modules = interpreter_modules(self.process, self.interpreter)
        return path in self._own_modules

    def is_coroutine_base(self, name: str) -> bool:
        """A function at the base of a coroutine's own C stack: greenlet's ``g_initialstub`` (``anchors.py``)."""
        return is_coroutine_base(name)

    def is_gil_wait(self, frame: NativeFrame) -> bool:
        """``take_gil``: a thread with this frame on its native stack is waiting for the GIL."""
        return self.functions.is_gil_wait(frame)
