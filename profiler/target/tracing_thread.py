"""The thread that traces: every ptrace call of a recording or a dump is made on a thread of its own, and the
end of that thread detaches every tracee at once, without stopping any.

A detach thread by thread must interrupt sleeping threads first, which a program sees (EINTR from
``epoll_wait``; ``restart_syscall``, which a seccomp filter may kill for); the kernel's detach at the
tracer's exit (``exit_ptrace``) wakes none. The main thread keeps what Python gives it alone, the signal
handlers, hands each tracing step to this thread (``call``) and waits; ``wake`` (SIGALRM) ends the thread's
current wait early so that it sees the stop flag at once.
Why, and what was measured: docs/decisions/tracing-thread.md."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar, cast

from profiler.target.alarm import on_alarm
from profiler.target.libc import syscall

T = TypeVar("T")

#: a Python signal handler, as ``signal.signal`` takes it
Handler = Callable[[int, Any], Any]

#: a step handed to the tracing thread: what to run, where its outcome goes ([True, value] or [False, the
#: exception]), and the event set once it is there
_Request = tuple[Callable[[], Any], list[Any], threading.Event]

#: tgkill(2)'s number, arch/x86/entry/syscalls/syscall_64.tbl (Python has ``pthread_kill`` only)
SYS_TGKILL = 234

#: the signal that ends the tracing thread's blocking wait (``events.py``: sigtimedwait and waitpid return
#: EINTR on a handled signal); the same as ``alarm.ThreadAlarm``'s, so a wait sees only one kind of wake-up
WAKE_SIGNAL = signal.SIGALRM

#: what the tracing thread blocks for its whole life: SIGCHLD, which ``events.SigchldWait`` takes with
#: sigtimedwait (every thread must block it), and the stop signals, which are the main thread's to handle
_BLOCKED_IN_THREAD = frozenset({signal.SIGCHLD, signal.SIGINT, signal.SIGTERM})

#: how often ``close`` looks whether the thread has left the kernel's thread list (``/proc/self/task``)
_GONE_POLL = 0.0005

#: how long ``close`` waits at most for that: the thread has returned from Python by then and only has to
#: finish its exit (microseconds); past this something is badly wrong, and nprof's own exit detaches anyway
_GONE_AT_MOST = 5.0


class TracingThread:
    """One thread that makes every ptrace call of a recording; its exit detaches every tracee (module
    docstring). Use as a context manager from the main thread, handing it work with ``call``."""

    def __init__(self, handlers: Mapping[int, Handler] | None = None, name: str = "nprof-tracer") -> None:
        """``handlers``: signal handlers the main thread installs for the thread's life, on behalf of code
        that runs on it (Python runs handlers on the main thread only); the thread blocks those signals, so
        that the kernel hands a process-wide one to a thread that takes it (``priority.on_sigxcpu``)."""
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._busy = False  #: the main thread waits for a ``call`` to return
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._native_id: int | None = None
        self._started = threading.Event()
        self._handlers = dict(handlers or {})
        self._old_handlers: dict[int, Any] = {}
        self._old_mask: set[int | signal.Signals] | None = None

    # --- the main thread's side ---------------------------------------------------------------------------

    def __enter__(self) -> TracingThread:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the tracing thread is driven from the main thread (it runs the signal handlers)")
        for signum, handler in {WAKE_SIGNAL: on_alarm, **self._handlers}.items():
            self._old_handlers[signum] = signal.signal(signum, handler)
            signal.siginterrupt(signum, True)
        # SIGCHLD blocked in the main thread too while the tracing thread waits for it (``events.py``); the
        # command ``record`` starts is given nprof's own mask (``LaunchedCommand``'s ``mask``)
        self._old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        self._thread.start()
        self._started.wait()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Left in the middle of a ``call`` (the KeyboardInterrupt of the signal that abandons the recording,
        # ``StopFlag``), the thread may still be sampling: nprof's own exit, which is next, ends it
        self.close(wait=not self._busy)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the tracing thread and return what it returns, or raise what it
        raised. The main thread waits meanwhile, running its signal handlers as signals come."""
        done = threading.Event()
        box: list[Any] = []
        self._busy = True
        self._requests.put((lambda: fn(*args, **kwargs), box, done))
        done.wait()
        self._busy = False
        ok, value = box
        if not ok:
            raise value
        return cast(T, value)

    def wake(self) -> None:
        """End the tracing thread's current wait (it then looks at its stop flag). Safe from a signal handler,
        and harmless once the thread has ended."""
        if self._native_id is not None and self._thread.is_alive():
            # by kernel thread id: a pthread handle may be freed once its thread ends (CPython's threads are
            # detached), and tgkill of an ended thread fails with ESRCH (or, its id taken again by a thread
            # of nprof's, gives that one a wake-up it ignores)
            syscall(SYS_TGKILL, os.getpid(), self._native_id, WAKE_SIGNAL)

    def close(self, wait: bool = True) -> None:
        """End the thread, which detaches every tracee, and, with ``wait``, return only once the kernel has
        done so: the thread is gone from ``/proc/self/task`` (``Thread.join`` returns a little before the
        thread's exit reaches ``exit_ptrace``)."""
        self._requests.put(None)
        if not wait:
            return  # the thread may still take its signals: the handlers stay, where the defaults end nprof
        self._thread.join()
        end = time.monotonic() + _GONE_AT_MOST
        while os.path.exists(f"/proc/self/task/{self._native_id}") and time.monotonic() < end:
            time.sleep(_GONE_POLL)
        if self._old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)
            self._old_mask = None
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._old_handlers.clear()

    # --- the tracing thread's side ------------------------------------------------------------------------

    def _serve(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED_IN_THREAD.union(self._handlers))
        self._native_id = threading.get_native_id()
        self._started.set()
        while True:
            request = self._requests.get()
            if request is None:
                return  # the thread's exit: the kernel detaches every tracee it had
            fn, box, done = request
            try:
                box[:] = [True, fn()]
            except BaseException as e:  # handed to the caller, which raises it in the main thread
                box[:] = [False, e]
            finally:
                done.set()

