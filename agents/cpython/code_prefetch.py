"""New code objects a snapshot met, decoded from a copy the thread's next stop makes of them, named in advance.

After a snapshot meets code objects the cache does not know, each one's header and strings are read once
with the thread running, only to learn which ranges its decode reads; the thread's next stops copy those
ranges with their plan (``Snapshot.attach``, up to ``KEEP_STOPS``). A later walk that meets the code object
decodes it from that copy (``CodeCache.decode_copied``): the frame that runs it kept it alive during that
stop. One the walk does not meet is not decoded; a copy that does not serve the decode whole leaves the
thread to a stop that walks in full.
Why that is as sure as a decode during the stop, and what it saved: docs/decisions/code-prefetch.md."""

from __future__ import annotations

from agents.cpython.code import CodeCache, alive
from agents.cpython.memory import Read
from agents.cpython.plan import build_plan
from agents.cpython.scatter import Readv, Snapshot
from profiler.target.ptrace import raw_process_vm_readv

#: most code objects one ``CodePrefetch`` is made for; a stack that meets more new ones at once has its next stop
#: walk in full instead, which decodes them with two scatter reads. Each costs ~4 reads here after resume
#: (its header, name, file name and line table; ~4-5 us each, ``scatter.py``), and its ranges must fit one
#: ``process_vm_readv`` (``plan.IOV_MAX``, 1024 iovecs: ~4 each, fewer where they coalesce)
MAX_CODES = 256


#: stops of its thread that copy a new code object its snapshot met (the second stop, then the next ones),
#: while none of them runs it. A function that runs in short calls (a comprehension, a small helper) has
#: returned by the second stop, so that copy is seldom met; the first later stop that runs it decodes it
#: from its own copy. A function whose share of the thread's samples is below 1/KEEP_STOPS may so stay
#: unnamed, each of its samples taken again later (``python_stacks_met_new_code`` counts them). The copy
#: costs each stop ~0.6 us per range in the plan's ``process_vm_readv`` (``scatter.py``; ~4 per code
#: object). Measured on a loop where a function of 1 us calls takes ~9% of the time, recorded at 100 Hz for
#: 3 s on 3.12: copied in the second stop only, 11-20 of its samples were taken again elsewhere, and in
#: some recordings it never showed; copied on, one was. 64 is also how long a read plan keeps a range no walk
#: used (``plan.SHRINK_AFTER``).
KEEP_STOPS = 64


class _Recorder:
    """A ``Read`` that notes the range each read returned (``{addr: bytes returned}``)."""

    __slots__ = ("_read", "ranges")

    def __init__(self, read: Read) -> None:
        self._read = read
        self.ranges: dict[int, int] = {}

    def __call__(self, addr: int, size: int) -> bytes:
        data = self._read(addr, size)
        if len(data) > self.ranges.get(addr, 0):
            self.ranges[addr] = len(data)
        return data


class CodePrefetch:
    """The code objects a thread's snapshot met and the cache could not name, and the ranges to copy for
    them in the thread's next stop."""

    __slots__ = ("codes", "ages", "lengths", "snap")

    def __init__(
        self, codes: list[int], lengths: dict[int, int], ages: dict[int, int], readv: Readv = raw_process_vm_readv
    ) -> None:
        self.codes = codes
        self.ages = ages  #: code object -> stops it was copied in since one whose walk did not meet it
        self.lengths = lengths  #: address -> bytes the read after resume returned there
        self.snap = Snapshot(readv)
        # sorted and coalesced, as a thread's plan is; the buffer is sized now: allocating in the stop
        # would lengthen it
        self.snap.fit(build_plan([], list(lengths.items())))

    @classmethod
    def of(
        cls, cache: CodeCache, codes: list[int], kept: CodePrefetch | None = None, readv: Readv = raw_process_vm_readv
    ) -> CodePrefetch | None:
        """After resume: for the code objects at ``codes`` that ``cache`` does not know under the identity
        their header shows now, the ranges a decode of each reads, as they read now; None if there is none
        (no live code object with readable strings is there now), or more than MAX_CODES to look at. The
        code objects ``kept`` still waits for are looked at again too, and keep their ages."""
        ages = dict.fromkeys(codes, 0)
        if kept is not None:
            room = max(0, MAX_CODES - len(ages))  # the new ones first: a walk just met them
            ages = {code: kept.ages[code] for code in kept.codes[:room]} | ages  # (those met again start over)
            codes = list(ages)
        if len(codes) > MAX_CODES:
            return None
        new: list[int] = []
        lengths: dict[int, int] = {}
        size = cache.identity.size
        for code in codes:
            recorder = _Recorder(cache.read)
            header = recorder(code, size)
            found = cache.lookup(code, header, 0, counted=False)
            if (not isinstance(found, tuple) or not alive(header, cache.objects.refcnt_split)
                    or cache.strings_of(recorder, found) is None):  # fmt: skip
                continue  # known under this identity, or nothing a stop could decode
            new.append(code)
            for addr, length in recorder.ranges.items():
                if lengths.get(addr, 0) < length:
                    lengths[addr] = length
        return cls(new, lengths, {code: ages[code] for code in new}, readv) if new else None

    def take(self, tid: int) -> None:
        """During the stop, where the thread's snapshot does not copy it with its plan (``Snapshot.attach``):
        copy every range with one more ``process_vm_readv``."""
        self.snap.take(tid)

    def decode(self, cache: CodeCache, met: list[int]) -> int:
        """After resume: decode, from the stop's copy alone, the code objects of ``met`` (those the walk of
        that stop's snapshot met) it was made for; how many of them the cache knows now."""
        if not self.snap.done:
            return 0
        known = 0
        for code in set(met).intersection(self.codes):
            if cache.decode_copied(code, self._copied) is not None:
                known += 1
        return known

    def keep(self, cache: CodeCache) -> CodePrefetch | None:
        """After resume, once a snapshot it was copied for settled: itself, for the thread's next stop to
        copy again, if it was made for code objects still not decoded (that walk did not meet them: their
        functions had returned) and not yet copied in KEEP_STOPS stops; else None. Their ranges are
        still copied whole: the next ``of`` (a new code object met) drops the rest."""
        ages, waiting = self.ages, []
        for code in cache.unknown(self.codes):
            ages[code] += 1
            if ages[code] < KEEP_STOPS:
                waiting.append(code)
        self.codes = waiting
        return self if waiting else None

    def _copied(self, addr: int, size: int) -> bytes:
        """A ``Read`` of the stop's copy: at an address read after resume, as many bytes as were read there
        (at most ``size``), if the stop copied them; b"" for anything else (nothing is read now)."""
        size = min(size, self.lengths.get(addr, 0))
        snap = self.snap
        offset = snap.plan.find(addr, size, snap.done) if size else -1
        return bytes(snap.view[offset : offset + size]) if offset >= 0 else b""
