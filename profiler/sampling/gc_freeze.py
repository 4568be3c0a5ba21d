"""Keeping the cyclic garbage collector's full passes out of a recording.

Most of what nprof holds while it samples lives as long as the recording and holds no reference cycles: ELF
and symbol tables, decoded unwind rules, agent sessions, and the stack memo's frames (up to ~110k objects).
CPython's collector walks all of it in every full (generation 2) collection, which it starts once the objects
that survived the young collections reach a quarter of those it already holds. Measured here (3.12 program
calling json and re in two threads, recorded at 1 kHz for 8 s): two full collections of 15-38 ms each, one
of them ~0.3 s in, right after the start-up's allocations; every tick due meanwhile came late.

So the sampler moves what survives into the collector's permanent generation (``gc.freeze``) when it starts,
and again once a second after a young collection (generations 0 and 1), which frees the cyclic garbage
that is still young instead of keeping it. The same recording then had no full collection while sampling;
each freeze took 0.05-1.2 ms. When sampling ends everything is handed back (``gc.unfreeze``): the process's
collector works as before, and what it kept meanwhile (cyclic garbage that survived two young collections)
is collected then. Reference counting frees frozen objects as usual.

A process that froze objects itself (a server that forks workers) is left alone: ``gc.unfreeze`` would
undo its freeze too.
"""

from __future__ import annotations

import gc

#: seconds between freezes, so the growth a full collection could still have to walk. The recording above
#: added ~14k tracked objects per second (110k in 8 s, most of them the memo's frames and keys), and a full
#: collection walked ~5k objects per ms (38 ms for ~180k): at most ~3 ms, against 0.05-1.2 ms per freeze
FREEZE_INTERVAL = 1.0


class SurvivorFreezer:
    """``start`` and ``stop`` around sampling; ``tick`` between ticks (never while a thread is stopped)."""

    def __init__(self) -> None:
        self._active = False
        self._next = 0.0

    def start(self, now: float) -> None:
        if not gc.isenabled() or gc.get_freeze_count():
            return  # collection is off, or the process manages its permanent generation itself
        gc.freeze()
        self._active = True
        self._next = now + FREEZE_INTERVAL

    def tick(self, now: float) -> None:
        if self._active and now >= self._next:
            self._next = now + FREEZE_INTERVAL
            gc.collect(1)
            gc.freeze()

    def stop(self) -> None:
        if self._active:
            self._active = False
            gc.unfreeze()
