"""How ``nprof record`` takes SIGINT and SIGTERM: as a flag the set-up and the recording look at
(``StopFlag``), never as an exception raised wherever nprof happens to be.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType

from profiler.target.alarm import SignalHandler


class StopFlag:
    """SIGINT and SIGTERM end the recording at the next safe point instead of raising mid-capture, and what
    was sampled is still resolved and written. The signal often comes twice: a terminal's Ctrl-C reaches
    the whole process group, `timeout` sends it to its child and then to the group, and a user presses
    Ctrl-C again while the profile is written. So the second only says what is going on; the third falls
    back to the default handler (KeyboardInterrupt, or SIGTERM's exit; the tracer's guards, or the
    kernel, still resume and detach every thread).

    The flag is up from the fork of the command on, through the set-up, which looks at it between its
    steps (``raise_if_stopped``). Python's own handler raised KeyboardInterrupt wherever the set-up was, in
    code that cannot pass it on. Of 60 SIGINTs sent 0.20-0.30 s after launch, 1 to 5 (three sweeps) ended
    nprof by SIGINT (status -2) after it had printed its message: the exception had gone through an
    ``exec`` of source text, in which a dataclass being defined by a lazy import makes its methods, and
    CPython marks a KeyboardInterrupt raised there as unhandled even when it is caught later (and ends a
    ``python -m`` run by SIGINT: Py_RunMain's check; a script's ``sys.exit`` skips it). 2 of 60 went
    into an at-fork callback of logging's instead, which printed "Exception ignored" and dropped it: the
    Ctrl-C was lost, and the whole command was recorded.

    A signal nprof was started with ignored still stops it: a script's background job has SIGINT ignored
    (POSIX, for asynchronous lists without job control), and ``nprof record ... & kill -INT $!`` is how a
    script ends a recording. The command nprof starts keeps it ignored, as it would run alone
    (``ignored``, which ``LaunchedCommand`` takes)."""

    #: the signal that abandons what was sampled: the first stops, the second is answered with a notice
    ABANDON_AT = 3

    def __init__(self) -> None:
        self.signal: int | None = None
        self.count = 0
        self._old: dict[int, SignalHandler] = {}
        #: the signals that were ignored before the flag took them
        self.ignored: frozenset[int] = frozenset()
        #: called on every signal taken: ends the tracing thread's wait, so that it sees the flag at once
        #: (``target/tracing_thread.py``; signals reach the main thread only)
        self.wake: Callable[[], None] = lambda: None

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._on_signal)
        self.ignored = frozenset(sig for sig, old in self._old.items() if old == signal.SIG_IGN)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.signal is None:
            self.signal = signum
        self.wake()
        name = signal.Signals(signum).name
        if self.count + 1 == self.ABANDON_AT:
            print(f"nprof: {name} again: finishing the profile of what was sampled; one more abandons it",
                  file=sys.stderr)  # fmt: skip
        elif self.count >= self.ABANDON_AT:
            for sig, handler in self._old.items():
                signal.signal(sig, handler)
            signal.raise_signal(signum)  # handled at once by the default: KeyboardInterrupt, or the exit

    def ignore_on_exit(self) -> None:
        """At the flag's exit, leave SIGINT and SIGTERM ignored instead of handing them back: the command is
        done and its exit code decided, and nprof ignores them on the way out anyway (``entry.py``). Handed
        back to Python's handler first, the second signal of a pair, sent as the top table was printed,
        came in between and raised KeyboardInterrupt out of ``entry.py``, and nprof died by SIGINT (status
        -2) with everything written (``test_a_signal_after_the_profile_is_written_does_not_change_the_exit``
        failed so in 1 of 30 runs, and in 0 of 20 with the signals left ignored)."""
        self._old = dict.fromkeys(self._old, signal.SIG_IGN)

    def __call__(self) -> bool:
        return self.signal is not None

    def raise_if_stopped(self) -> None:
        """A step of the set-up: a signal that came before it ends the set-up here (SetupInterrupted)."""
        if self.signal is not None:
            raise SetupInterrupted(self.signal)


class SetupInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while nprof started the command or attached: what the set-up did is undone, and
    nprof exits as a shell reports that signal (128 + its number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name} while starting; nothing was recorded")
        self.signal = signum


@contextlib.contextmanager
def sigint_noted() -> Iterator[list[int]]:
    """While the body runs (an import of nprof's engine), SIGINT is only noted in the list yielded, to be
    answered after it: a KeyboardInterrupt raised inside an import can end nprof by SIGINT after it chose
    its exit code (``entry.py`` says how). Python's handler, or SIGINT ignored (a script's background job:
    ``kill -INT`` still stops nprof), is put back after; a handler an embedding program set is left alone."""
    noted: list[int] = []
    before = signal.getsignal(signal.SIGINT)
    held = before is signal.default_int_handler or before == signal.SIG_IGN

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append(signum)

    if held:
        signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        if held:
            signal.signal(signal.SIGINT, before)  # ignored again: the command nprof starts inherits that
