"""What the user sees while and after recording: the live status line and the top-functions table."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from profiler.config import ExportConfig
from profiler.model import Mechanism, SampleClass
from profiler.profile.session import Session
from profiler.sampling.sampler import Sampler, Tick
from profiler.tree.calltree import included
from profiler.tree.mechanics import label
from profiler.tree.totals import function_totals

#: least time between two redraws of the status line
REDRAW_INTERVAL = 0.25

#: the widest function label the top table prints: C++ template instances ran to 1,151 characters (a PyTorch
#: kernel's lambda), lines no terminal shows whole; the profile files keep every name whole
LABEL_WIDTH = 100
#: a parenthesis that is part of a C++ name, not a parameter list (the demangler's spelling)
_ANONYMOUS_NAMESPACE = "(anonymous namespace)"

#: the counters that are errors, and what each counts, as the end of a recording lists them
ERROR_COUNTERS = {
    "stack_read_errors": ("stack copy failed", "stack copies failed"),
    "agent_capture_errors": ("runtime capture failed", "runtime captures failed"),
    "agent_decode_errors": ("runtime decode failed", "runtime decodes failed"),
    "agent_refresh_errors": ("runtime refresh failed", "runtime refreshes failed"),
    "agent_settle_errors": ("runtime settle failed", "runtime settles failed"),
    "stack_outside_mappings": ("stack pointer outside every mapping", "stack pointers outside every mapping"),
    "python_stacks_truncated": ("Python stack cut short (a looping or unreadable chain)",
                                "Python stacks cut short (a looping or unreadable chain)"),
    "python_stacks_unreadable": ("Python thread state unreadable", "Python thread states unreadable"),
    "python_code_unreadable": ("Python code object unreadable", "Python code objects unreadable"),
    "merge_unanchored": ("sample's Python frames not placed among its native frames",
                         "samples' Python frames not placed among their native frames"),
    # (the same, as sessions written before 2026-11-29 counted it)
    "merge_mismatch": ("sample's Python frames not placed among its native frames",
                       "samples' Python frames not placed among their native frames"),
}  # fmt: skip


def error_count(session: Session, sampler: Sampler | None = None) -> int:
    return sum(session.counters.get(c, 0) for c in ERROR_COUNTERS)


#: error counters that count samples: the summary gives their share of the samples too
SAMPLE_ERRORS = frozenset({"merge_unanchored", "merge_mismatch"})


def error_summary(session: Session) -> str:
    """"0 errors", or the count and what they were, most first (each counter is in the session file)."""
    counts = sorted(((session.counters.get(c, 0), c, texts) for c, texts in ERROR_COUNTERS.items()), reverse=True)
    total = sum(n for n, _, _ in counts)
    if not total:
        return "0 errors"
    samples = max(session.total_samples, 1)
    return f"{total:,} error{'' if total == 1 else 's'}: " + ", ".join(
        f"{n:,} {texts[n != 1]}" + (f" ({100 * n / samples:.1f}%)" if c in SAMPLE_ERRORS else "")
        for n, c, texts in counts if n)  # fmt: skip


class StatusLine:
    """One line on stderr, redrawn in place: elapsed time, samples, achieved rate, threads, errors.

    Drawn only when stderr is a terminal, so logs and pipes are not filled with carriage returns.
    """

    def __init__(self, sampler: Sampler, stream: TextIO = sys.stderr, enabled: bool | None = None) -> None:
        self.sampler = sampler
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._width = 0

    def update(self, tick: Tick, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < REDRAW_INTERVAL:
            return
        self._last = now
        s = self.sampler
        session = s.session
        elapsed = max(tick.time, 1e-9)
        threads = sum(1 for t in s.tracer.seized.records.values() if not t.gone)
        text = (
            f"nprof: {elapsed:6.1f}s  {session.total_samples:,} samples  {s.ticks / elapsed:6.1f} Hz  "
            f"{threads} thread{'s' if threads != 1 else ''}  {error_count(session, s)} errors"
        )
        self._width = max(self._width, len(text))
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()

    def clear(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()


#: a runtime mechanism's line (``tree/mechanics.py``) is in the table, whatever its rank, when at least this
#: share of the samples had it on their stack: as for the end of a recording's notices
#: (``sampling/notices.py``), below 1% no share in the profile moves by a point
MECHANISM_LINE_SHARE = 0.01

#: what each mechanism's line stands for, said under the table when it is shown (docs/usage.md, "The table
#: at the end of a recording")
MECHANISM_NOTES = {
    Mechanism.GIL_HANDOFF: "releasing the GIL and waking a thread that waits for it (drop_gil, and the futex "
    "wake-ups below it): the cost of threads taking turns at the GIL",
    Mechanism.GIL_WAIT: "blocked in take_gil until the thread running Python code releases the GIL",
    Mechanism.GC: "the cyclic garbage collector's passes (gc_collect_main), after allocations or gc.collect(); "
    "finalizers it runs count as their own functions",
    Mechanism.IMPORT: "Python's import machinery (importlib, PyImport_*, extension modules' init); the imported "
    "modules' own code counts as theirs, in total% only",
}


def top_table(session: Session, config: ExportConfig, limit: int = 10) -> str:
    """The functions with the most samples, by self and total share, and, where native frames were recorded
    with runtime frames, by Python self share (the samples whose innermost Python frame is the function,
    whatever native code ran below it); rows ordered by the larger of self and Python self. A runtime's
    mechanisms (GIL hand-off, waiting for the GIL, garbage collection, import) are lines of their own, each
    with a note under the table saying what it is."""
    totals, samples = function_totals(session, config)
    idle_note = "idle included" if config.idle else "idle excluded, --idle to include"
    if not samples and not session.total_samples and session.threads and not session.meta.idle_stacks:
        # Threads asleep since nprof attached are not stopped without --idle, and have no stack to count
        return ("No samples: every thread slept for the whole recording, and a sleeping thread is not stopped "
                "without --idle; record with --idle to see where they sleep.")
    if not samples:
        return f"No samples to show ({idle_note})."
    python = session.meta.native and any(t.python_samples for t in totals)
    ranked = sorted(totals, key=lambda t: (-max(t.self_samples, t.python_samples), -t.total_samples, t.label))
    rows = ranked[:limit]
    rows += [t for t in ranked[limit:] if t.mechanism is not None and t.total_samples >= MECHANISM_LINE_SHARE * samples]
    lines = [f"Top functions ({samples:,} samples, {idle_note}):",
             "   self%  total%  " + ("py-self%  " if python else "") + "function"]  # fmt: skip
    for t in rows:
        column = ""
        if python:
            column = f"{100 * t.python_samples / samples:7.1f}%  " if t.python_samples else "       -  "
        lines.append(f"  {100 * t.self_samples / samples:5.1f}%  {100 * t.total_samples / samples:5.1f}%  {column}"
                     f"{short_label(t.label)}")  # fmt: skip
    for t in rows:
        if t.mechanism is not None:
            lines.append(f"  {label(t.mechanism)}: {MECHANISM_NOTES[t.mechanism]}")
    waiting = _gil_waits_left_out(session, config)
    if waiting:
        lines.append(waiting)
    return "\n".join(lines)


def _gil_waits_left_out(session: Session, config: ExportConfig) -> str | None:
    """A line for the samples of threads waiting for the GIL that the table leaves out with the idle ones, when
    they are at least ``MECHANISM_LINE_SHARE`` of all: a server's threads queueing for the GIL."""
    if included(SampleClass.GIL_WAIT, config):
        return None
    waiting = sum(n for (_t, _s, _stop, cls), n in session.samples.items() if cls == SampleClass.GIL_WAIT)
    every = session.total_samples
    if not every or waiting < MECHANISM_LINE_SHARE * every:
        return None
    return (f"  and {waiting:,} samples ({100 * waiting / every:.1f}% of all) were {label(Mechanism.GIL_WAIT)}, left "
            "out with the idle ones: --idle shows them")


def short_label(label: str, width: int = LABEL_WIDTH) -> str:
    """``label`` in at most ``width`` characters, for the top table: a C++ name longer than that loses its
    template arguments (``<…>``), then its parameter lists (``(…)``), then its middle; the module or file
    in parentheses at its end stays. A Python name (``<module>``, ``f.<locals>.g``) keeps its angle
    brackets: only a bracket right after a name's character opens template arguments."""
    if len(label) <= width:
        return label
    name, suffix = label, ""
    cut = label.rfind(" (")
    if label.endswith(")") and cut > 0 and ")" not in label[cut + 2 : -1]:
        name, suffix = label[:cut], label[cut:]
    name = _collapse(name, "<", ">")
    if len(name) + len(suffix) > width:
        name = _collapse(name, "(", ")")
    room = max(1, width - len(suffix))
    if len(name) > room:
        name = name[: room - 1] + "…"
    return name + suffix


def _collapse(name: str, opening: str, closing: str) -> str:
    """``name`` with each outermost group from ``opening`` to its ``closing`` shown as ``opening…closing``.
    A ``<`` opens a group only after a name's character, and not as ``operator<``; a ``(`` not as
    ``(anonymous namespace)``."""
    out: list[str] = []
    depth = 0
    for i, c in enumerate(name):
        if depth == 0:
            opens = c == opening and _opens(name, i)
            out.append(opening + "…" if opens else c)
            depth = int(opens)
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                out.append(closing)
    return "".join(out)


def _opens(name: str, i: int) -> bool:
    if name[i] == "(":
        return not name.startswith(_ANONYMOUS_NAMESPACE, i)
    before = name[:i]
    return bool(before) and (before[-1].isalnum() or before[-1] == "_") and not before.endswith("operator")
