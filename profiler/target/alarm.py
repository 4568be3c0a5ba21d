"""A deadline for blocking waits: SIGALRM delivered to one thread, the one that waits.

The tracer blocks in ``waitpid`` and relies on a signal to return from it at a deadline (EINTR). A
process-wide alarm (``setitimer(ITIMER_REAL)``) is the wrong tool once nprof has other threads: numpy's
OpenBLAS starts a worker thread at import, and the kernel may hand a process-directed SIGALRM to any
thread that does not block it, leaving the waiting thread blocked. A POSIX timer with
``SIGEV_THREAD_ID`` (timer_create(2)) signals exactly one thread.
"""

from __future__ import annotations

import ctypes
import signal
import struct
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from profiler.target.libc import libc

#: what ``signal.signal`` takes and gives back (typeshed's private ``signal._HANDLER``)
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

CLOCK_MONOTONIC = 1  # linux/time.h
SIGEV_THREAD_ID = 4  # asm-generic/siginfo.h


class _sigevent(ctypes.Structure):
    """struct sigevent (asm-generic/siginfo.h) on x86-64: the thread id sits where the union begins."""

    _fields_ = (
        ("sigev_value", ctypes.c_void_p),
        ("sigev_signo", ctypes.c_int),
        ("sigev_notify", ctypes.c_int),
        ("sigev_notify_thread_id", ctypes.c_int),
        ("_pad", ctypes.c_int * 11),  # the union is 48 bytes: sizeof(struct sigevent) is 64
    )


#: struct itimerspec {struct timespec it_interval, it_value;} with timespec {time_t tv_sec; long tv_nsec},
#: packed in one call: setting four ctypes fields costs three times the syscall itself
_ITIMERSPEC = struct.Struct("<qqqq")


_timer_create = libc.timer_create
_timer_create.argtypes = (ctypes.c_int, ctypes.POINTER(_sigevent), ctypes.POINTER(ctypes.c_void_p))
_timer_settime = libc.timer_settime
_timer_settime.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_timer_delete = libc.timer_delete
_timer_delete.argtypes = (ctypes.c_void_p,)


def on_alarm(signum: int, frame: object) -> None:
    """Does nothing: SIGALRM's only job is to make a blocking wait return EINTR (this alarm's deadline, and
    ``tracing_thread.TracingThread.wake``)."""


class ThreadAlarm:
    """SIGALRM to the creating thread after a delay, repeating every ``interval`` after that.

    Arming again replaces the previous deadline, so there is no need to disarm between waits; the
    repetition is a backstop for the race where the alarm fires between checking the clock and entering
    the wait (there is no "pwaitpid" to close it).
    """

    def __init__(self) -> None:
        #: the handler this alarm replaced, to put back at ``close``; None where it found one in place
        self._old_handler: SignalHandler = None
        if threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(signal.SIGALRM, on_alarm)
            signal.siginterrupt(signal.SIGALRM, True)
        elif not callable(signal.getsignal(signal.SIGALRM)):
            # only the main thread may install a handler, and SIGALRM's default action ends the process:
            # ``tracing_thread.py`` installs one before it starts its thread
            raise RuntimeError("an alarm off the main thread needs a SIGALRM handler installed (tracing_thread.py)")
        event = _sigevent()
        event.sigev_signo = signal.SIGALRM
        event.sigev_notify = SIGEV_THREAD_ID
        event.sigev_notify_thread_id = threading.get_native_id()
        self._timer: ctypes.c_void_p | None = ctypes.c_void_p()
        if _timer_create(CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(self._timer)) != 0:
            err = ctypes.get_errno()
            if self._old_handler is not None:
                signal.signal(signal.SIGALRM, self._old_handler)
            raise OSError(err, "timer_create failed")
        self._spec = ctypes.create_string_buffer(_ITIMERSPEC.size)
        self._spec_address = ctypes.addressof(self._spec)
        self._timer_id = self._timer.value
        self._first = 0.0  #: monotonic time of the armed alarm's first expiry
        self._every = 0.0  #: its repetition after that (0: it does not repeat)

    def arm(self, delay: float, interval: float) -> None:
        ns = max(int(delay * 1e9), 1000)
        every = int(interval * 1e9)
        _ITIMERSPEC.pack_into(self._spec, 0, every // 1_000_000_000, every % 1_000_000_000,
                              ns // 1_000_000_000, ns % 1_000_000_000)  # fmt: skip
        self._first = time.monotonic() + ns / 1e9
        self._every = every / 1e9
        _timer_settime(self._timer_id, 0, self._spec_address, None)

    def fires_within(self, delay: float) -> bool:
        """True if the alarm as armed will fire within ``delay`` seconds from now, and then repeat.

        A wait bounded by a deadline needs an alarm by that deadline, not at it: the waiter re-checks the clock
        on every EINTR. An alarm that already repeats often enough spares a ``timer_settime`` per tick.
        """
        if self._every <= 0.0:
            return False
        now = time.monotonic()
        next_fire = self._first if now < self._first else now + self._every
        return next_fire <= now + delay

    def disarm(self) -> None:
        self._every = 0.0
        self._first = float("inf")
        _ITIMERSPEC.pack_into(self._spec, 0, 0, 0, 0, 0)
        _timer_settime(self._timer_id, 0, self._spec_address, None)

    def close(self) -> None:
        if self._timer is not None:
            self.disarm()
            _timer_delete(self._timer)
            self._timer = None
            if self._old_handler is not None:
                signal.signal(signal.SIGALRM, self._old_handler)
