"""The code objects a snapshot's walk met, identified after resume: their headers read then, checked against
what the code cache decoded (``code.py``).

A snapshot (``scatter.py``) holds no code-object headers: they were most of its ranges, one each, where a
3.11+ frame chain is one or two. ``CPythonSession.settle`` reads them after resume instead, and keeps the
cache's keys only if each header read then still holds the identity decoded, and the object looks alive.
That is as certain as the check during a stop. The object the frame ran at the stop wrote its identity at
that address when it was made, before the stop. If that identity was not the known one, then the known
bytes can be there now only if a code object made at the same address since had the known identity.
Telling those apart is beyond the stop's own check as well (and impossible on 3.12+, where ``co_version``
differs). A code object the cache does not know, or that no longer holds the known identity, still needs a
stop (``settle`` asks for one): a new one must be decoded from bytes copied while a frame keeps it alive
(``code_prefetch.py``).
"""

from __future__ import annotations

import functools
import itertools
import struct

from agents.cpython.code import MAX_LIVE_REFCNT, CodeCache, CodeInfo
from agents.cpython.plan import FixedRanges


class HeaderCheck:
    """The code objects a thread's snapshot met, checked as one: the reads of their headers, and the
    identities and keys the cache decoded for them. A thread keeps its check while its stack runs the same
    code objects and the cache has decoded nothing new; a check is then that read, two ``unpack_from`` and
    one tuple comparison, where a lookup, an unpack and a comparison per code object cost nprof ~12 us more
    per sample on a 5-frame chain (3.12, flat out). Making one is a few list operations (the structs are
    shared: ``_structs``): it is made again at 47% of the samples of a pytest run, 79% of a mix of request
    kinds, 14-24 us each."""

    __slots__ = ("codes", "version", "reads", "keys", "split", "_idents", "_refcnts", "_expected")

    def __init__(
        self,
        codes: list[int],
        entries: list[CodeInfo],
        identity: struct.Struct,
        size: int,
        version: int,
        split: bool = False,
    ):
        self.codes = codes
        self.version = version  #: ``CodeCache.version`` when made: a newer cache may hold newer entries
        self.reads = FixedRanges(codes, size)  #: ``size`` bytes of each header, landing ``size`` apart
        self.keys = dict(zip(codes, [entry.key for entry in entries]))
        #: 3.14+: ``ob_refcnt`` is the low 32 bits of the first word (``code.alive``)
        self.split = split
        self._idents, self._refcnts = _structs(identity.format, identity.size, len(codes), size, split)
        self._expected = tuple(itertools.chain.from_iterable([entry.ident for entry in entries]))

    @classmethod
    def of(cls, cache: CodeCache, codes: list[int], size: int) -> HeaderCheck | None:
        """A check of the code objects at ``codes`` (headers read ``size`` bytes each, at least the
        identity's); None if the cache never decoded one of them."""
        entries = cache.entries_at(codes)
        if entries is None:
            return None
        return cls(codes, entries, cache.identity, size, cache.version, cache.objects.refcnt_split)

    def holds(self, view: bytes | memoryview) -> bool:
        """Whether the headers ``reads`` copied to the start of ``view`` still show the identities decoded, of
        objects that look alive (the module's docstring says why that settles what the stop saw); False: the
        capture must be made in a stop."""
        if self._idents.unpack_from(view) != self._expected:
            return False
        refcnts = self._refcnts.unpack_from(view)
        if self.split:  # (count, ob_overflow) pairs: every count set, every overflow 0
            return bool(0 < min(refcnts[0::2]) and not any(refcnts[1::2]))
        return bool(0 < min(refcnts) and max(refcnts) < MAX_LIVE_REFCNT)


@functools.lru_cache(maxsize=512)
def _structs(
    identity: str, identity_size: int, count: int, size: int, split: bool = False
) -> tuple[struct.Struct, struct.Struct]:
    """The structs that unpack ``count`` headers read ``size`` apart: their identity fields (``identity`` is
    the format of one), and their ``ob_refcnt`` (at +0; ``split``: its u32 and ``ob_overflow`` after it).
    Kept per count: compiling them was most of a check's making (67 against 24 us on a pytest run's
    stacks)."""
    pad = f"{size - identity_size}x" if size > identity_size else ""
    refcnt = f"IH{size - 6}x" if split else f"q{size - 8}x"
    return (
        struct.Struct("<" + (identity[1:] + pad) * count),
        struct.Struct("<" + refcnt * count),
    )
