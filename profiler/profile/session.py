"""A recording: interned samples, their metadata and counters, and the .nprof file that keeps them.

A sample is counted under the key (thread, stack, stop reason, sample class), so the session holds one
row per distinct key however long the recording runs, and any output format can be rendered from it later
(``nprof report``) without re-sampling.

File format (``.nprof``): a zip archive as written by ``numpy.savez_compressed``, holding the numpy
columns below plus ``meta``, the orjson-encoded metadata. Loaded with ``allow_pickle=False`` and validated
before use: a corrupt file raises ``SessionFormatError``, never something worse.
"""

from __future__ import annotations

import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, BinaryIO

import numpy as np
import orjson

from profiler import __version__
from profiler.atomic import atomic_write
from profiler.errors import SessionFormatError
from profiler.model import FrameInfo, Mechanism, Module, SampleClass, StopReason
from profiler.profile.memo import FrameMemo
from profiler.profile.tables import FrameKey, FrameTable, StackTable

#: frame keys ``intern_stack``'s cache holds before it starts over (``memo.py``): a key costs ~150 bytes a
#: frame (a tuple of four ints); unbounded, a program with ever new stacks (a random call graph at 1 kHz)
#: grew it by ~2 MB/s, 39 MB in 20 s. A miss interns the frames again, 2 dict lookups each.
MAX_CACHED_FRAMES = 1 << 17
FORMAT_NAME = "nprof-session"
#: 2: frames carry where their function is declared, their source tree's root, whether they are start-up
#: code and their runtime mechanism (``FrameInfo``); a version 1 file loads with those fields unset.
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)


@dataclass(frozen=True)
class ProfiledThread:
    pid: int
    tid: int
    start_time: int  #: clock ticks since boot; with tid, a key no reused tid can collide with
    name: str


@dataclass
class SessionMeta:
    pid: int
    command: list[str]
    start_time: float = field(default_factory=time.time)  #: wall-clock seconds since the epoch
    duration: float = 0.0
    rate: float = 100.0
    stack_bytes: int = 0  #: the stack window each thread's copies started with
    max_stack_bytes: int = 0  #: how far a thread's window could grow (0: a session from before it could)
    native: bool = True
    nprof_version: str = __version__
    processes: dict[int, list[str]] = field(default_factory=dict)  #: pid -> command line
    exit_status: dict[int, int] = field(default_factory=dict)  #: pid -> exit code (negative: signal)
    notices: list[str] = field(default_factory=list)  #: one-line notices shown to the user
    #: recorded with --idle: threads asleep were stopped for their stacks. Without it an idle sample counts
    #: the stack its thread had when last seen running (``idle.py``), not where it sleeps.
    idle_stacks: bool = False


class Session:
    def __init__(self, meta: SessionMeta) -> None:
        self.meta = meta
        self.threads: list[ProfiledThread] = []
        self.modules: list[Module] = []
        self.agents: list[str] = []
        self.frames = FrameTable()
        self.stacks = StackTable()
        self.samples: dict[tuple[int, int, int, int], int] = {}
        self.counters: dict[str, int] = {}
        #: samples counted but not added to ``samples`` yet: those of dormant threads (``dormancy.py``), which
        #: are added in one step per thread when it wakes or the recording ends
        self.deferred_samples = 0
        self.frame_info: list[FrameInfo] | None = None
        #: frame id -> inlined calls at that address, outermost first (shown above the frame itself)
        self.inlined: dict[int, list[FrameInfo]] = {}
        self._thread_ids: dict[tuple[int, int, int], int] = {}
        self._stack_cache: FrameMemo[int] = FrameMemo(MAX_CACHED_FRAMES)  #: frame keys -> stack id

    # --- recording --------------------------------------------------------------------------------------

    def thread_index(self, pid: int, tid: int, start_time: int, name: str) -> int:
        key = (pid, tid, start_time)
        index = self._thread_ids.get(key)
        if index is None:
            index = len(self.threads)
            self.threads.append(ProfiledThread(pid, tid, start_time, name))
            self._thread_ids[key] = index
        return index

    def rename_thread(self, index: int, name: str) -> None:
        t = self.threads[index]
        if name and name != t.name:
            self.threads[index] = ProfiledThread(t.pid, t.tid, t.start_time, name)

    def agent_index(self, name: str) -> int:
        if name not in self.agents:
            self.agents.append(name)
        return self.agents.index(name)

    def intern_stack(self, keys: tuple[FrameKey, ...]) -> int:
        """Stack id of frame keys given innermost first (the order unwinders produce)."""
        sid = self._stack_cache.get(keys)
        if sid is None:
            intern = self.frames.intern
            sid = self.stacks.intern([intern(k) for k in reversed(keys)])
            self._stack_cache.put(keys, sid, len(keys))
        return sid

    def add_sample(self, thread: int, stack: int, stop: StopReason, cls: SampleClass, count: int = 1) -> None:
        key = (thread, stack, int(stop), int(cls))
        self.samples[key] = self.samples.get(key, 0) + count

    def count(self, counter: str, n: int = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + n

    # --- reading ----------------------------------------------------------------------------------------

    def sample_columns(self) -> dict[str, np.ndarray]:
        """The samples as numpy columns: thread, stack, stop, cls, count."""
        n = len(self.samples)
        keys = np.array(list(self.samples.keys()), dtype=np.int64).reshape(n, 4)
        return {
            "thread": keys[:, 0].astype(np.int32),
            "stack": keys[:, 1].astype(np.int32),
            "stop": keys[:, 2].astype(np.uint8),
            "cls": keys[:, 3].astype(np.uint8),
            "count": np.fromiter(self.samples.values(), dtype=np.int64, count=n),
        }

    @property
    def total_samples(self) -> int:
        return sum(self.samples.values()) + self.deferred_samples

    def stop_reason_counts(self) -> dict[str, int]:
        """Samples per stop reason, by label. Summed by the reason's number first, and labelled once per
        reason: the notices at the end of a recording ask several times, and an enum lookup per distinct
        sample took 0.2 s a call for a session of 340,000."""
        by_number: dict[int, int] = {}
        for (_t, _s, stop, _c), n in self.samples.items():
            by_number[stop] = by_number.get(stop, 0) + n
        out: dict[str, int] = {}
        for stop, n in by_number.items():
            label = StopReason(stop).label
            out[label] = out.get(label, 0) + n
        return out

    # --- the .nprof file --------------------------------------------------------------------------------

    def save(self, path: str) -> None:
        with atomic_write(path) as f:
            self.write_to(f)

    def write_to(self, f: BinaryIO) -> None:
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "meta": asdict(self.meta),
            "threads": [asdict(t) for t in self.threads],
            "modules": [asdict(m) for m in self.modules],
            "agents": self.agents,
            "counters": self.counters,
            "frame_info": None
            if self.frame_info is None
            else [_info_row(f) for f in self.frame_info],
            "inlined": {str(fid): [_info_row(f) for f in frames] for fid, frames in self.inlined.items()},
        }
        arrays = {f"frames_{k}": v for k, v in self.frames.columns().items()}
        arrays.update({f"stacks_{k}": v for k, v in self.stacks.columns().items()})
        arrays.update({f"samples_{k}": v for k, v in self.sample_columns().items()})
        arrays["meta"] = np.frombuffer(orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS), dtype=np.uint8)
        np.savez_compressed(f, **arrays)  # type: ignore[arg-type]  # (numpy types every keyword as allow_pickle)

    @classmethod
    def load(cls, path: str) -> Session:
        try:
            with open(path, "rb") as f:
                head = f.read(_SNIFF_BYTES)
        except FileNotFoundError:
            raise SessionFormatError(f"{path}: no such file.") from None
        except OSError as e:
            raise SessionFormatError(f"{path}: cannot read it ({e.strerror or e}).") from None
        if not head.startswith(_ZIP_MAGIC):  # else numpy guesses a pickle, and says so to the user
            raise SessionFormatError(
                f"{path}: not an nprof session file{_what_it_is(head)}.",
                "nprof report reads the .nprof file that nprof record writes beside every recording.",
            )
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {name: z[name] for name in z.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error) as e:
            # (zlib.error: a member whose deflated bytes are damaged, which zipfile lets through as they are)
            raise SessionFormatError(f"{path}: corrupt or truncated session file ({e}).") from None
        return _from_arrays(path, arrays)


#: a session file is an ``np.savez`` archive: a zip, whose first local file header starts with this
#: signature (PKWARE's APPNOTE.TXT, section 4.3.7)
_ZIP_MAGIC = b"PK\x03\x04"
_SNIFF_BYTES = 1 << 16  #: enough for a first line of folded stacks (5.7 KB seen for a deep Python stack)


def _what_it_is(head: bytes) -> str:
    """What a file that is not a session looks like, for the error: the other outputs nprof writes."""
    if head.startswith(b"\x1f\x8b"):  # RFC 1952 gzip member header: pprof profiles are gzipped
        return " (it is gzip-compressed: a pprof profile?)"
    text = head.lstrip()
    if text.startswith(b"{") and b"speedscope" in head:
        return " (it is a speedscope JSON profile)"
    if text.startswith((b"{", b"[")):
        return " (it is JSON)"
    first, newline, _ = head.partition(b"\n")
    if newline and first and first.rsplit(b" ", 1)[-1].strip().isdigit():  # "frame;frame;frame COUNT"
        return " (it is folded stacks)"
    if not head:
        return " (it is empty)"
    return ""


def _info_row(f: FrameInfo) -> list[object]:
    """A frame's fields, in the order ``_info`` reads them: a session written before the later ones existed
    (version 1: the first six) loads with their defaults."""
    return [f.name, f.file, f.line, f.module, f.inlined, f.interpreter, f.function_file, f.function_line,
            f.source_root, f.startup, f.mechanism.value if f.mechanism else None]  # fmt: skip


#: the ``Mechanism`` of each value a session file may hold
_MECHANISMS = {m.value: m for m in Mechanism}


#: ``FrameInfo``'s fields' defaults, in its order: those of the fields a shorter (older) row lacks
_DEFAULTS = [f.default for f in fields(FrameInfo)]


def _info(row: list[Any]) -> FrameInfo:
    """A row of ``_info_row``: ``FrameInfo``'s fields in its order, the mechanism (the last) by its value."""
    values = [*row[:10], *_DEFAULTS[len(row) : 10], _MECHANISMS.get(row[10]) if len(row) > 10 else None]
    return FrameInfo(*values)


def _from_arrays(path: str, arrays: dict[str, np.ndarray]) -> Session:
    def need(name: str) -> np.ndarray:
        if name not in arrays:
            raise SessionFormatError(f"{path}: corrupt session file (missing {name}).")
        return arrays[name]

    try:
        meta = orjson.loads(need("meta").tobytes())
    except orjson.JSONDecodeError:
        raise SessionFormatError(f"{path}: corrupt session file (unreadable metadata).") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise SessionFormatError(f"{path}: not an nprof session file.")
    if meta.get("version") not in READS_VERSIONS:
        raise SessionFormatError(
            f"{path}: session format version {meta.get('version')} is not supported by nprof {__version__} "
            f"(it reads versions {', '.join(map(str, READS_VERSIONS))}).",
            "Render it with the nprof version that recorded it.",
        )
    try:
        m = meta["meta"]
        m["processes"] = {int(k): v for k, v in m.get("processes", {}).items()}
        m["exit_status"] = {int(k): v for k, v in m.get("exit_status", {}).items()}
        session = Session(SessionMeta(**m))
        session.threads = [ProfiledThread(**t) for t in meta["threads"]]
        session.modules = [Module(**mod) for mod in meta["modules"]]
        session.agents = list(meta["agents"])
        session.counters = dict(meta["counters"])
        if meta["frame_info"] is not None:
            session.frame_info = [_info(row) for row in meta["frame_info"]]
        session.inlined = {int(fid): [_info(row) for row in rows] for fid, rows in meta["inlined"].items()}
    except (KeyError, TypeError, ValueError) as e:
        raise SessionFormatError(f"{path}: corrupt session file metadata ({e}).") from None
    frames = {k: need(f"frames_{k}") for k in ("kind", "module", "address", "offset")}
    stacks = {k: need(f"stacks_{k}") for k in ("parent", "frame")}
    samples = {k: need(f"samples_{k}") for k in ("thread", "stack", "stop", "cls", "count")}
    _validate(path, frames, stacks, samples, session)
    session.frames = FrameTable.from_columns(frames)
    session.stacks = StackTable.from_columns(stacks)
    for t, s, stop, c, n in zip(*(samples[k].tolist() for k in ("thread", "stack", "stop", "cls", "count"))):
        session.samples[(t, s, stop, c)] = n
    return session


def _validate(
    path: str,
    frames: dict[str, np.ndarray],
    stacks: dict[str, np.ndarray],
    samples: dict[str, np.ndarray],
    session: Session,
) -> None:
    """Every index in the file must point inside its table, and the prefix tree must point backwards."""

    def same_length(cols: Sequence[np.ndarray]) -> bool:
        return len({len(c) for c in cols}) == 1

    n_frames, n_stacks = len(frames["kind"]), len(stacks["parent"])
    problems = []
    if not (same_length(list(frames.values())) and same_length(list(stacks.values()))):
        problems.append("column lengths differ")
    if not same_length(list(samples.values())):
        problems.append("sample columns differ in length")
    if n_stacks and (
        stacks["frame"].min() < 0
        or stacks["frame"].max() >= n_frames
        or (stacks["parent"] >= np.arange(n_stacks)).any()
        or stacks["parent"].min() < -1
    ):
        problems.append("stack table out of range")
    if len(samples["thread"]) and (
        samples["thread"].min() < 0
        or samples["thread"].max() >= len(session.threads)
        or samples["stack"].min() < -1
        or samples["stack"].max() >= n_stacks
        or samples["count"].min() < 0
        or samples["stop"].max() >= len(StopReason)
        or samples["cls"].max() >= len(SampleClass)
    ):
        problems.append("samples out of range")
    if session.frame_info is not None and len(session.frame_info) != n_frames:
        problems.append("frame names do not match the frame table")
    if any(not 0 <= fid < n_frames for fid in session.inlined):
        problems.append("inlined frames of a frame that does not exist")
    if problems:
        raise SessionFormatError(f"{path}: corrupt session file ({'; '.join(problems)}).")
