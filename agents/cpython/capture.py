"""What the agent copies while a thread is stopped: its thread state's current frame, the frame chain, and
the GIL holder. Nothing else happens during the stop (DESIGN.md section 2, rule 1): no decoding, no
strings, no caches beyond a dict lookup; every loop is bounded.

Per frame the copy keeps the minimum the decoder needs after resume: the frame's address (for locals), its
code pointer, its position (``f_lasti`` or the instruction pointer) and its flags (``is_entry`` on 3.11,
``owner`` on 3.11+). Each distinct code pointer's *identity header* (``CodeLayout.size`` bytes) is what
``code.py`` checks its cache against, to guard it against address reuse. A walk in the stop (``capture``)
copies the headers too: a code object cannot be freed while a frame runs it, so a new one is decoded there.
A walk of a snapshot after resume (``CPythonSession.settle``) reads them then, and keeps only known
identities (``code.py`` says why that is as sure): read plans copy no headers, so a snapshot is the thread
state, the cframes and the frames alone, a few ranges where the headers were one each."""

from __future__ import annotations

import enum

from agents.cpython.layout import FrameStruct, Layout, fields_struct, span
from agents.cpython.memory import USER_LIMIT
from agents.cpython.scatter import PAGE_SIZE, ScatterReader
from agents.cpython.threads import ThreadStateInfo
from profiler.model import RuntimeFrame

MAX_FRAMES = 4096  #: the reference's bound (py-spy's too); a deeper chain is cut and counted
#: how far up the C stack an eval loop's ``_PyCFrame.previous`` may be from its own: the enclosing eval loop
#: is one C call chain up the same stack, which glibc sizes at RLIMIT_STACK's soft limit for new threads,
#: 8 MiB by default (pthread_create(3)); further away, or below, it is not a cframe
MAX_CFRAME_GAP = 8 << 20
#: what a capture read, for the next read plan: (fixed reads in order, other reads)
Wanted = tuple[list[tuple[int, int]], list[tuple[int, int]]]


class CaptureStatus(enum.IntEnum):
    """How a capture ended. Anything but OK is counted by the session; TRUNCATED_* still carry frames."""

    OK = 0
    STALE = 1  #: the thread state no longer belongs to this thread (exited, tid reused): remapped at refresh
    UNREADABLE = 2  #: the thread state itself could not be read
    TRUNCATED_UNREADABLE = 3  #: a frame pointer led to unreadable memory
    TRUNCATED_LOOP = 4  #: the chain came back to a frame it had visited
    TRUNCATED_DEPTH = 5  #: MAX_FRAMES frames were read
    TRUNCATED_BAD_POINTER = 6  #: a frame pointer was not a plausible address
    #: stopped while entering an eval loop, before its ``_PyCFrame`` links to the enclosing one (3.11/3.12):
    #: the Python stack is the enclosing eval loop's, which nothing read yet leads to. No frames
    TRUNCATED_ENTERING = 7
    #: no thread state is known for this OS thread (yet): a new thread, or a native one. No frames
    UNMAPPED = 8

    @property
    def truncated(self) -> bool:
        return CaptureStatus.TRUNCATED_UNREADABLE <= self <= CaptureStatus.TRUNCATED_ENTERING


class StackCapture:
    """One thread's copy.

    During the stop the walk keeps only what it must: each frame's address (``addrs``) and its fields as
    one unpacked tuple (``values``, in the copier's field order), and each distinct code pointer's identity
    header (``code_headers``: offset in ``raw``; -1 for unreadable memory, -2 for a shim's). ``raw`` is a view
    of the reader's buffer, valid only during the stop: the code objects are identified from it there,
    once per distinct object (``CodeCache.decode_new``), which fills ``code_keys`` (code pointer -> key,
    None: not a code object).

    After resume, ``frames`` unpacks the tuples into ``(frame addr, code addr, position, flags)``,
    innermost first, where position is ``f_lasti`` (<=3.10) or the instruction pointer (3.11+), flags is
    ``owner | is_entry << 8`` (0 on <=3.10) and a shim's code is 0."""

    __slots__ = ("tid", "tstate", "status", "holds_gil", "addrs", "values", "code_headers", "raw",
                 "code_keys", "key", "late_codes", "cframe", "decoded", "_copier", "_frames")  # fmt: skip

    #: a capture made in the stop has nothing for the tracer to copy with the stack window (runtime.py)
    co_read = None

    def __init__(
        self, tid: int, tstate: int, status: CaptureStatus = CaptureStatus.OK, copier: ChainCopier | None = None
    ) -> None:
        self.tid = tid
        self.tstate = tstate
        self.status = status
        self.holds_gil: bool | None = None
        self.addrs: list[int] = []
        self.values: list[tuple[int, ...]] = []
        self.code_headers: dict[int, int] = {}
        self.raw: bytes | memoryview = b""
        self.code_keys: dict[int, int | None] = {}
        self.key: int | None = 0  #: UNMAPPED: what the thread was looked up by (its tid, or its fs_base on
        #: <=3.10); None for a thread of another pid namespace not seen yet (``ThreadBindings.learn_key``)
        #: a snapshot's walk: the code objects whose headers the snapshot does not hold (``settle`` reads
        #: them after resume and accepts only known identities; their ``code_headers`` stay -1)
        self.late_codes: list[int] = []
        #: 3.11/3.12: ``tstate->cframe``, the running eval loop's ``_PyCFrame`` on the C stack (``marks.py``)
        self.cframe = 0
        #: after ``CPythonSession.frames``: the runtime frames it returned, and the index in ``frames`` of
        #: each (those it added itself, past the end, have none)
        self.decoded: tuple[list[RuntimeFrame], list[int]] | None = None
        self._copier = copier
        self._frames: list[tuple[int, int, int, int]] | None = None

    @property
    def frames(self) -> list[tuple[int, int, int, int]]:
        """``(frame addr, code addr, position, flags)`` per frame, innermost first (unpacked on first use)."""
        if self._frames is None:
            self._frames = self._copier.frames_of(self) if self._copier is not None else []
        return self._frames

    def __repr__(self) -> str:
        return f"StackCapture(tid={self.tid}, {self.status.name}, {len(self.addrs)} frames, gil={self.holds_gil})"

    def forget_frames(self) -> None:
        """Drop what a walk kept, before another walk of the same capture starts over."""
        self.addrs.clear()
        self.values.clear()
        self.code_headers.clear()


class ChainCopier:
    """The stop-time walk for one interpreter layout. Constants are precomputed so the loop only unpacks."""

    def __init__(self, layout: Layout, runtime: int) -> None:
        t, f = layout.thread, layout.frame
        self.native_keys = t.native_thread_id is not None
        self.tstate_unpack, names = fields_struct({"ident": (t.key, "Q"), "frame": (t.frame, "Q")})
        self.tstate_ident = names.index("ident")
        self.tstate_frame = names.index("frame")
        self.cframe_offset = t.cframe_current_frame
        #: bytes of a ``_PyCFrame`` read: through ``current_frame``, and ``previous`` where it is known
        cframe_fields = ((t.cframe_current_frame, 8), (t.cframe_previous, 8))
        self.cframe_size = span(*cframe_fields) if t.cframe_current_frame is not None else 0
        #: 3.11/3.12: (offset of ``previous`` in a ``_PyCFrame``, offset of the thread state's ``root_cframe``),
        #: for the check of a walk against the enclosing eval loop (``_check_enclosing``); None otherwise
        self.enclosing: tuple[int, int] | None = None
        #: bytes of the thread state read: its fields, and on 3.11/3.12 on to ``root_cframe`` (the struct's
        #: end), which encloses every thread's outermost eval loop: in the same iovec, not one more
        self.tstate_size = self.tstate_unpack.size
        if t.cframe_previous is not None and t.root_cframe is not None:
            self.enclosing = (t.cframe_previous, t.root_cframe)
            self.tstate_size = max(self.tstate_size, t.root_cframe + self.cframe_size)
        fields = {"previous": (f.previous, "Q"), "code": (f.code, "Q")}
        fields["instr"] = (f.instr, "i" if f.kind is FrameStruct.FRAME_OBJECT else "Q")
        if f.owner is not None:
            fields["owner"] = (f.owner, "B")
        if f.is_entry is not None:
            fields["is_entry"] = (f.is_entry, "B")
        self.frame_unpack, names = fields_struct(fields)
        self.i_prev, self.i_code, self.i_instr = (names.index(n) for n in ("previous", "code", "instr"))
        self.i_owner = names.index("owner") if "owner" in names else -1
        self.i_entry = names.index("is_entry") if "is_entry" in names else -1
        self.frame_size = self.frame_unpack.size
        #: frames live in a per-thread stack that grows upward (3.11+), not in separate heap objects
        self.data_stack = f.kind is FrameStruct.INTERPRETER_FRAME
        self.shim_owners = f.shim_owners
        self.ref_mask = f.ref_mask
        self.code_size = layout.code.size
        # where the GIL holder is: the runtime's gilstate (<=3.11) or the interpreter's GIL (3.12+)
        self.gil_runtime = runtime + layout.runtime.tstate_current if layout.runtime.tstate_current else 0
        i = layout.interpreter
        self.gil_holder = i.gil_last_holder or 0
        self.gil_locked = i.gil_locked or 0
        self.gil_base = min(self.gil_holder, self.gil_locked)
        self.gil_size = span((self.gil_holder, 8), (self.gil_locked, 4)) - self.gil_base if i.gil_locked else 0

    def _holds_gil(
        self, reader: ScatterReader, info: ThreadStateInfo, fixed: list[tuple[int, int]]
    ) -> bool | None:
        if self.gil_runtime:
            fixed.append((self.gil_runtime, 8))
            off = reader.get(self.gil_runtime, 8)
            return None if off < 0 else reader.u64(off) == info.addr
        if self.gil_size and info.gil:
            fixed.append((info.gil + self.gil_base, self.gil_size))
            off = reader.get(info.gil + self.gil_base, self.gil_size)
            if off < 0:
                return None
            holder = reader.u64(off + self.gil_holder - self.gil_base)
            locked = reader.view[off + self.gil_locked - self.gil_base]  # an int that is 0 or 1: its low byte
            return bool(locked) and holder == info.addr
        return None

    def copy(
        self, reader: ScatterReader, tid: int, key: int, info: ThreadStateInfo
    ) -> tuple[StackCapture, Wanted | None]:
        """Walk ``info``'s chain through ``reader`` (already begun). Returns the capture and, when the plan
        missed reads or holds many it no longer needs, what the next plan should prefetch: the fixed reads
        (thread state, GIL) and the rest (cframe, frames, code headers)."""
        out = StackCapture(tid, info.addr, copier=self)
        fixed = [(info.addr, self.tstate_size)]
        off = reader.get(info.addr, self.tstate_size)
        if off < 0:
            out.status = CaptureStatus.UNREADABLE
            return out, (fixed, [])
        values = self.tstate_unpack.unpack_from(reader.view, off)
        if values[self.tstate_ident] != key:
            out.status = CaptureStatus.STALE
            return out, None
        out.holds_gil = self._holds_gil(reader, info, fixed)
        frame = values[self.tstate_frame]
        cframe: list[tuple[int, int]] = []
        if self.cframe_offset is not None and frame:
            # 3.11/3.12: tstate->cframe lives on the C stack of the running eval loop, one per C-level entry
            # into it, so it moves whenever a call goes through C (sorted(key=f), a callback...). Planned
            # with the frames, not the fixed reads, so that a plan keeps the places it was seen at before
            # (plan.next_ranges), as it keeps frames: the C stack stays mapped while the thread lives.
            cframe.append((frame, self.cframe_size))
            current = out.cframe = frame
            off = reader.get(frame, self.cframe_size) if 4096 <= frame < USER_LIMIT else -1
            frame = reader.u64(off + self.cframe_offset) if off >= 0 else 0
            seen: set[int] = set()
            status = self._walk(reader, frame, out, seen)
            if off >= 0 and self.enclosing is not None and status != CaptureStatus.TRUNCATED_DEPTH:
                previous_offset, root_offset = self.enclosing
                previous = reader.u64(off + previous_offset)
                root = info.addr + root_offset
                status = self._check_enclosing(reader, root, current, previous, out, cframe, status, seen)
        else:
            status = self._walk(reader, frame, out, set())
        out.status = status
        self._copy_headers(reader, out)
        # a plan that read everything and holds at most twice what this capture needed is kept as it is; a
        # larger one may be cut back to this capture's reads (``ThreadSlot.note`` decides when)
        needed = len(fixed) + len(cframe) + len(out.addrs)
        if not reader.misses and len(reader.plan.where) <= 2 * needed:
            return out, None
        size = self.frame_size
        frames = [(addr, size) for addr in out.addrs]
        if self.data_stack and frames:
            # 3.11+ push each call's frame just above the newest one on the thread's data stack: reading
            # on to the end of the newest frame's page covers calls made deeper by the next capture
            # (found by ``ReadPlan.find``), at no risk of a fault (scatter.PAGE_SIZE)
            newest = out.addrs[0]
            frames[0] = (newest, ((newest + size - 1) | (PAGE_SIZE - 1)) + 1 - newest)
        return out, (fixed, cframe + frames)

    def _check_enclosing(
        self,
        reader: ScatterReader,
        root: int,
        current: int,
        previous: int,
        out: StackCapture,
        cframe: list[tuple[int, int]],
        status: CaptureStatus,
        seen: set[int],
    ) -> CaptureStatus:
        """3.11/3.12: check the walk from the current ``_PyCFrame`` against the enclosing eval loop's, and
        walk that one instead when the thread was stopped while its eval loop was being entered.

        Every eval loop links its first frame to the enclosing cframe's ``current_frame`` (3.11: the entry
        frame's ``previous``; 3.12: its entry shim's), and ceval.c asserts as much when it returns, so a
        consistent chain passes through that frame, or the enclosing cframe is the thread's
        ``root_cframe``, which has none. But ``_PyEval_EvalFrameDefault`` sets ``tstate->cframe`` to its new
        ``_PyCFrame`` some instructions before it fills in that cframe's ``current_frame`` and ``previous``
        (one 16-byte store for both, in the pyenv 3.11 and 3.12 builds: 6 and 25 instructions later), which
        until then hold what the C stack held there before:

        * ``current_frame``: on 3.12 often the shim frame of an earlier call at the same depth, whose
          ``previous`` is not set yet; on 3.11 the frame an earlier call at that depth returned from, whose
          memory the new call is reusing, or a record whose chain ends at once (seen entering generators in
          a pytest run: ~1 in 10,000 samples). Seen in 2-3% (3.12) and 1-1.5% (3.11) of the samples of a
          loop calling ``sorted(key=lambda x: -x)``, which had shown bogus frames, or none.
        * ``previous``: usually the enclosing cframe all the same (an earlier call at that depth stored
          it), then the walk goes on from there: the Python stack at that point is the enclosing eval
          loop's, and the native stack has the new eval loop's frame without a group yet, a surplus anchor
          the merge places. But it can be anything: a pointer that is neither the thread's
          ``root_cframe`` nor further up the C stack is not a cframe, and the capture is
          ``TRUNCATED_ENTERING`` with no frames (``settle`` has the thread stopped again instead).

        Returns the status of the walk kept: the first's (whose frames stay) when it went through the
        enclosing frame or the enclosing cframe cannot be read."""
        if current == root:
            return status  # no eval loop runs
        if previous != root:  # (the root is read with the thread state: ``tstate_size``)
            if not current < previous <= current + MAX_CFRAME_GAP or previous & 7:
                out.forget_frames()
                return CaptureStatus.TRUNCATED_ENTERING
            cframe.append((previous, self.cframe_size))
        off = reader.get(previous, self.cframe_size)
        if off < 0:
            return status
        enclosing = reader.u64(off + (self.cframe_offset or 0))  # (set: the layout has cframes)
        if not enclosing or enclosing in seen:
            return status  # the outermost eval loop, or a chain that reached the enclosing one's frames
        out.forget_frames()
        return self._walk(reader, enclosing, out, set())

    def _walk(self, reader: ScatterReader, frame: int, out: StackCapture, seen: set[int]) -> CaptureStatus:
        """Follow the chain from ``frame``, keeping each frame's address and unpacked fields in ``out`` and
        noting each distinct code pointer in ``out.code_headers`` (-1 for now; a shim's -2); ``seen`` (empty)
        gets every frame address met. In ``capture`` the loop runs with the thread stopped, so it does
        nothing that can wait until after resume."""
        addrs, values, headers = out.addrs, out.values, out.code_headers
        append_addr, append_values = addrs.append, values.append
        add_seen = seen.add
        unpack = self.frame_unpack.unpack_from
        view, size, mask = reader.view, self.frame_size, self.ref_mask
        i_prev, i_code, i_owner, shims = self.i_prev, self.i_code, self.i_owner, self.shim_owners
        get = reader.get
        for _ in range(MAX_FRAMES):
            if not frame:
                return CaptureStatus.OK
            if frame & 7 or not 4096 <= frame < USER_LIMIT:
                return CaptureStatus.TRUNCATED_BAD_POINTER
            if frame in seen:
                return CaptureStatus.TRUNCATED_LOOP
            add_seen(frame)
            off = get(frame, size)
            if off < 0:
                return CaptureStatus.TRUNCATED_UNREADABLE
            v = unpack(view, off)
            append_addr(frame)
            append_values(v)
            code = v[i_code] & mask
            if code not in headers:
                headers[code] = -1
                if shims and v[i_owner] in shims:
                    headers[code] = -2  # a C-stack shim's code (or None) is never decoded
            frame = v[i_prev]
        return CaptureStatus.TRUNCATED_DEPTH if frame else CaptureStatus.OK

    def frames_of(self, capture: StackCapture) -> list[tuple[int, int, int, int]]:
        """After resume: the capture's frames as ``(frame addr, code addr, position, flags)``."""
        out = []
        i_code, i_instr, i_owner, i_entry = self.i_code, self.i_instr, self.i_owner, self.i_entry
        mask, shims = self.ref_mask, self.shim_owners
        for addr, v in zip(capture.addrs, capture.values):
            flags = v[i_owner] if i_owner >= 0 else 0
            if i_entry >= 0 and v[i_entry]:
                flags |= 0x100
            out.append((addr, 0 if flags in shims else v[i_code] & mask, v[i_instr], flags))
        return out

    def _copy_headers(self, reader: ScatterReader, out: StackCapture) -> None:
        """Copy the identity header of each distinct code object on the stack.

        The headers stay where the reads put them: ``out.raw`` is a view of the buffer (no copy during the
        stop; it is read before the reader's next capture) and ``out.code_headers[code]`` each one's offset
        in it (-1: unreadable; -2: a shim's code, never read). A walk of a snapshot (``reader.frozen``)
        reads nothing: the headers that the snapshot's ranges do not hold anyway are left in
        ``out.late_codes``, for ``CPythonSession.settle`` to read after resume. They are not misses: plans
        do not copy headers (the module's docstring)."""
        csize, find, done = self.code_size, reader.plan.find, reader.done
        headers = out.code_headers
        missing: list[int] = []
        for code, off in headers.items():
            if off == -2 or code & 7 or not 4096 <= code < USER_LIMIT:
                continue
            if (off := find(code, csize, done)) >= 0:
                headers[code] = off
            else:
                missing.append(code)
        if missing:
            if reader.frozen:
                out.late_codes = missing
            else:
                headers.update(zip(missing, reader.read_ranges([(code, csize) for code in missing])))
        out.raw = reader.view[: reader.tail]
