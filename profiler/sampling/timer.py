"""When the next tick is due: jittered intervals around 1/rate.

A fixed period can phase-lock with periodic work in the target and sample the same point of a loop every
time (py-spy issue #94 motivated its exponential intervals). Uniform jitter in [0.5, 1.5] x period breaks
the lock as well, while bounding the shortest gap, so two stops of one thread are never back to back.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

#: half-width of the jitter, as a fraction of the period
JITTER = 0.5


class Timer:
    def __init__(self, rate: float, seed: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.period = 1.0 / rate
        #: the step is uniform in [1 - JITTER, 1 + JITTER] periods: _shortest + _spread * U[0, 1)
        self._shortest = self.period * (1.0 - JITTER)
        self._spread = self.period * 2.0 * JITTER
        self._uniform = random.Random(seed).random  # one C call per tick, not random.uniform's Python frame
        self._clock = clock
        self.next_due = clock()
        self.late_ticks = 0
        #: seconds the schedule jumped forward at its restarts: over a period each, the ticks that were due
        #: and never taken, because the sampler ran late (what ``notices.rate_shortfall`` reports)
        self.skipped = 0.0

    def advance(self) -> float:
        """Schedule the tick after the current one and return its monotonic due time.

        A tick that is already late by more than a period is not followed by a burst of catch-up ticks:
        the schedule restarts from now (that tick is due at once, as a tick late by less already is), and
        the skipped ticks are counted (``late_ticks`` the restarts, ``skipped`` the time they skipped). A rate
        the sampler cannot reach thus samples as fast as it can, rather than also sleeping after every late
        tick.
        """
        now = self._clock()
        due = self.next_due + self._shortest + self._spread * self._uniform()
        if due < now - self.period:
            self.late_ticks += 1
            self.skipped += now - due
            due = now
        self.next_due = due
        return due

    @property
    def missed_ticks(self) -> float:
        """How many ticks were due and not taken, on average: the time skipped over the mean period."""
        return self.skipped / self.period
