"""What the end of a recording tells the user about how well it could sample: diagnoses made once, from the
session and the modules, after the last tick (``Sampler.close`` passes each message on as a notice)."""

from __future__ import annotations

from collections.abc import Iterable

from profiler.binary.objfile import ObjectFile
from profiler.config import MAX_FRAMES, MAX_STACK_BYTES
from profiler.model import StopReason
from profiler.sampling.session import Session

#: the end of a recording says that the stack window was too small when at least this share of the
#: samples, and this many, lost native frames to it: below 1% no frame's share in the profile moves by a
#: point, and a handful of samples is noise (a thread's one deep moment)
WINDOW_NOTICE_SHARE = 0.01
WINDOW_NOTICE_MIN_SAMPLES = 10


def unwind_problems(objects: Iterable[ObjectFile], session: Session) -> list[str]:
    """One counted warning per module whose CFI was (partly) corrupt; frame pointers were used there."""
    messages = []
    for obj in objects:
        count, details = obj.unwind_problems()
        if count:
            session.count("modules_with_bad_cfi")
            session.count("bad_cfi_entries", count)
            messages.append(
                f"{obj.path}: {count} corrupt unwind entr{'y' if count == 1 else 'ies'} "
                f"({details[0] if details else 'see the session counters'}); frame pointers used there"
            )
    return messages


def stack_window_shortfall(session: Session, stack_bytes: int) -> str | None:
    """Say so when the copied window cut many native stacks short, and what copies more: a deep recursion or
    a program with big stack frames loses its outermost native frames (``main`` and what it called) in
    every such sample, which the profile shows as many shallow roots."""
    cut = session.stop_reason_counts().get(StopReason.WINDOW_EXHAUSTED.label, 0)
    total = session.total_samples
    if cut < WINDOW_NOTICE_MIN_SAMPLES or cut < WINDOW_NOTICE_SHARE * total:
        return None
    more = min(4 * stack_bytes, MAX_STACK_BYTES)
    remedy = f": --stack-bytes {more} copies more, at more cost per sample" if more > stack_bytes else ""
    return (
        f"{cut:,} samples ({100 * cut / total:.1f}%) had native stacks deeper than the {stack_bytes:,} bytes "
        f"copied per sample, so their outermost native frames are missing{remedy}"
    )


def depth_limit_shortfall(session: Session, max_frames: int) -> str | None:
    """Say so when many native walks were cut at ``max_frames`` (a recursion deeper than that), and what
    goes deeper: like a window too small, it loses the outermost frames of every such sample."""
    cut = session.stop_reason_counts().get(StopReason.DEPTH_LIMIT.label, 0)
    total = session.total_samples
    if cut < WINDOW_NOTICE_MIN_SAMPLES or cut < WINDOW_NOTICE_SHARE * total:
        return None
    more = min(4 * max_frames, MAX_FRAMES)
    remedy = f": --max-frames {more} goes deeper, at more cost per sample" if more > max_frames else ""
    return (
        f"{cut:,} samples ({100 * cut / total:.1f}%) had native stacks deeper than {max_frames:,} frames, so their "
        f"outermost native frames are missing{remedy}"
    )


def other_stack_samples(session: Session) -> str | None:
    """Say so when many walks ended at a signal frame whose interrupted code ran on another stack: a signal
    handler on an alternate signal stack. Only the stack the thread runs on is copied, so the callers of
    the code it interrupted are missing, whatever the window."""
    cut = session.stop_reason_counts().get(StopReason.OTHER_STACK.label, 0)
    total = session.total_samples
    if cut < WINDOW_NOTICE_MIN_SAMPLES or cut < WINDOW_NOTICE_SHARE * total:
        return None
    return (
        f"{cut:,} samples ({100 * cut / total:.1f}%) were taken in signal handlers running on an alternate "
        "signal stack (sigaltstack); nprof copies only the stack a thread runs on, so the callers of the "
        "code each handler interrupted are missing"
    )
