"""What the agent copies while a thread is stopped: its thread state's current frame, the frame chain, each
frame's code-object header, and the GIL holder. Nothing else happens during the stop (DESIGN.md section 2,
rule 1): no decoding, no strings, no caches beyond a dict lookup; every loop is bounded.

Per frame the copy keeps the minimum the decoder needs after resume: the frame's address (for locals), its
code pointer, its position (``f_lasti`` or the instruction pointer) and its flags (``is_entry`` on 3.11,
``owner`` on 3.11+). Per frame it also copies the *identity header* of the code object (``CodeLayout.size``
bytes): a code object cannot be freed while a frame runs it, so the header read during the stop is the one
moment its identity is certain. ``code.py`` compares it after resume to guard its cache against address reuse.
"""

from __future__ import annotations

import enum

from agents.cpython.layout import FrameKind, Layout, fields_struct, span
from agents.cpython.memory import USER_LIMIT
from agents.cpython.scatter import ScatterReader
from agents.cpython.threads import ThreadStateInfo

MAX_FRAMES = 4096  #: the reference's bound (py-spy's too); a deeper chain is cut and counted
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

    @property
    def truncated(self) -> bool:
        return self >= CaptureStatus.TRUNCATED_UNREADABLE


class StackCapture:
    """One thread's copy. ``frames`` are innermost first: ``(frame addr, code addr, position, flags)``, where
    position is ``f_lasti`` (<=3.10) or the instruction pointer (3.11+) and flags is ``owner | is_entry << 8``
    (0 on <=3.10). ``code_headers`` maps each distinct code pointer of the stack to the offset in ``raw`` of
    its identity header, or -1 (unreadable, or a shim). ``raw`` is a view of the reader's buffer, valid only
    during the stop: the code objects are identified from it there, once per distinct object
    (``CodeCache.decode_new``), which fills ``keys``, frame i's code key (None: not a code object), the only
    thing decoding needs after resume."""

    __slots__ = ("tid", "tstate", "status", "holds_gil", "frames", "code_headers", "raw", "keys")

    def __init__(self, tid: int, tstate: int, status: CaptureStatus = CaptureStatus.OK) -> None:
        self.tid = tid
        self.tstate = tstate
        self.status = status
        self.holds_gil: bool | None = None
        self.frames: list[tuple[int, int, int, int]] = []
        self.code_headers: dict[int, int] = {}
        self.raw: bytes | memoryview = b""
        self.keys: list[int | None] = []

    def __repr__(self) -> str:
        return f"StackCapture(tid={self.tid}, {self.status.name}, {len(self.frames)} frames, gil={self.holds_gil})"


class ChainCopier:
    """The stop-time walk for one interpreter layout. Constants are precomputed so the loop only unpacks."""

    def __init__(self, layout: Layout, runtime: int) -> None:
        t, f = layout.thread, layout.frame
        self.native_keys = t.native_thread_id is not None
        ident = t.native_thread_id if self.native_keys else t.thread_id
        self.tstate_unpack, names = fields_struct({"ident": (ident, "Q"), "frame": (t.frame, "Q")})
        self.tstate_ident = names.index("ident")
        self.tstate_frame = names.index("frame")
        self.tstate_size = self.tstate_unpack.size
        self.cframe_offset = t.cframe_current_frame
        fields = {"previous": (f.previous, "Q"), "code": (f.code, "Q")}
        fields["instr"] = (f.instr, "i" if f.kind is FrameKind.FRAME_OBJECT else "Q")
        if f.owner is not None:
            fields["owner"] = (f.owner, "B")
        if f.is_entry is not None:
            fields["is_entry"] = (f.is_entry, "B")
        self.frame_unpack, names = fields_struct(fields)
        self.i_prev, self.i_code, self.i_instr = (names.index(n) for n in ("previous", "code", "instr"))
        self.i_owner = names.index("owner") if "owner" in names else -1
        self.i_entry = names.index("is_entry") if "is_entry" in names else -1
        self.frame_size = self.frame_unpack.size
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
        (thread state, GIL, cframe) and the rest (frames, code headers)."""
        out = StackCapture(tid, info.addr)
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
        if self.cframe_offset is not None and frame:
            # 3.11/3.12: tstate->cframe lives on the C stack of the running eval loop
            fixed.append((frame, self.cframe_offset + 8))
            off = reader.get(frame, self.cframe_offset + 8) if 4096 <= frame < USER_LIMIT else -1
            frame = reader.u64(off + self.cframe_offset) if off >= 0 else 0
        frames = out.frames
        seen: set[int] = set()
        unpack = self.frame_unpack.unpack_from
        view, size, mask = reader.view, self.frame_size, self.ref_mask
        i_prev, i_code, i_instr = self.i_prev, self.i_code, self.i_instr
        i_owner, i_entry = self.i_owner, self.i_entry
        shims = self.shim_owners
        where, done = reader.plan.where, reader.done
        status = CaptureStatus.OK
        while frame:
            if frame & 7 or not 4096 <= frame < USER_LIMIT:
                status = CaptureStatus.TRUNCATED_BAD_POINTER
                break
            if frame in seen:
                status = CaptureStatus.TRUNCATED_LOOP
                break
            if len(frames) >= MAX_FRAMES:
                status = CaptureStatus.TRUNCATED_DEPTH
                break
            seen.add(frame)
            hit = where.get(frame)
            if hit is not None and hit[2] < done and hit[1] >= size:
                off = hit[0]
            else:
                off = reader.read_one(frame, size)
                if off < 0:
                    status = CaptureStatus.TRUNCATED_UNREADABLE
                    break
            v = unpack(view, off)
            flags = v[i_owner] if i_owner >= 0 else 0
            if i_entry >= 0 and v[i_entry]:
                flags |= 0x100
            code = v[i_code] & mask
            if flags in shims:
                code = 0  # a C-stack shim: its code (or None) is never decoded
            frames.append((frame, code, v[i_instr], flags))
            frame = v[i_prev]
        out.status = status
        codes = self._copy_headers(reader, out)
        if not reader.misses and len(where) <= 2 * (len(fixed) + len(frames) + len(codes)):
            return out, None
        return out, (fixed, [(f[0], size) for f in frames] + [(c, self.code_size) for c in codes])

    def _copy_headers(self, reader: ScatterReader, out: StackCapture) -> list[int]:
        """Copy the identity header of each distinct code object on the stack; returns those objects.

        The headers stay where the reads put them: ``out.raw`` is a view of the buffer (no copy during the
        stop; it is read before the reader's next capture) and ``out.code_headers[code]`` each one's offset
        in it (-1: none)."""
        csize, where, done = self.code_size, reader.plan.where, reader.done
        offsets: dict[int, int] = {}
        missing: list[int] = []
        for _frame, code, _position, _flags in out.frames:
            if code in offsets:
                continue
            if code & 7 or not 4096 <= code < USER_LIMIT:
                offsets[code] = -1
                continue
            hit = where.get(code)
            if hit is not None and hit[2] < done and hit[1] >= csize:
                offsets[code] = hit[0]
            else:
                offsets[code] = -1
                missing.append(code)
        if missing:
            offsets.update(zip(missing, reader.read_many(missing, csize)))
        out.code_headers = offsets
        out.raw = reader.view[: reader.tail]
        return [code for code, off in offsets.items() if off >= 0]
