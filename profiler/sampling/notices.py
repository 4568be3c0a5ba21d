"""What the end of a recording tells the user about how well it could sample: diagnoses made once, from the
session and the modules, after the last tick (``Sampler.close`` passes each message on as a notice)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence

from profiler.binary.objfile import ObjectFile
from profiler.config import MAX_FRAMES, MAX_STACK_BYTES
from profiler.model import FrameKind, Module, StopReason
from profiler.profile.session import Session
from profiler.sampling.timer import JITTER
from profiler.target.procfs import DISK_SLEEP, read_status, tracer_label

#: the end of a recording says that the stack window was too small when at least this share of the
#: samples, and this many, lost native frames to it: below 1% no frame's share in the profile moves by a
#: point, and a handful of samples is noise (a thread's one deep moment)
WINDOW_NOTICE_SHARE = 0.01
WINDOW_NOTICE_MIN_SAMPLES = 10


#: the end of a recording says the rate asked was not kept when more than this share of the ticks due were
#: skipped (the jitter and a few late ticks take a recording kept up with to 0.95-1.0 of the rate, measured
#: here)
RATE_NOTICE_SHARE = 0.8
#: ...and the recording had at least this many ticks (a short one's rate is mostly its start)
RATE_NOTICE_MIN_TICKS = 50


def rate_shortfall(
    ticks: int, missed: float, rate: float, tick_seconds: float, load: tuple[float, int] | None = None
) -> str | None:
    """A notice when many of the ticks due were never taken because nprof ran late (``Timer.missed_ticks``),
    and why: its ticks (``tick_seconds`` in all) took longer than the shortest jittered interval, half a
    period (many threads, deep stacks), or they did not and its thread waited for a CPU (``load``: the
    load average and the CPUs, said then). The profile's shares are still right, but its samples are fewer.
    Counted from the ticks due, not from the samples: a target whose threads sleep gives fewer samples at
    any rate (docs/decisions/true-notices.md)."""
    due = ticks + missed
    if ticks < RATE_NOTICE_MIN_TICKS or ticks >= RATE_NOTICE_SHARE * due:
        return None
    period = 1.0 / rate
    per_tick = tick_seconds / ticks
    said = (f"sampled at {rate * ticks / due:,.0f} Hz, not the {rate:,g} Hz asked: {100 * missed / due:.0f}% of "
            "the ticks due were skipped, as nprof ran late")  # fmt: skip
    if per_tick >= (1.0 - JITTER) * period:
        return (f"{said}: a tick (stopping, copying and unwinding the threads due) took {_ms(per_tick)} on average, "
                f"for a period of {_ms(period)}; a lower -r/--rate gives evenly spaced samples")  # fmt: skip
    machine = f" (load average {load[0]:.1f} on {load[1]} CPUs)" if load is not None else ""
    return (f"{said}: a tick took {_ms(per_tick)} on average, well within the {_ms(period)} period, but nprof's "
            f"thread waited to run: the machine was busy{machine}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2g} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"


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


def _cut_short(session: Session, reason: StopReason) -> str | None:
    """"N samples (x%)" when walks that stopped for ``reason`` are many enough to tell the user about."""
    return _many(session, session.stop_reason_counts().get(reason.label, 0))


def _many(session: Session, cut: int) -> str | None:
    """"N samples (x%)" for ``cut`` walks, or None when they are too few to tell the user about. The share
    is of the samples walked: an idle thread's sample counts its last stack again without a walk (stop
    reason "reused"), and a process of many sleeping threads hid walks cut in all its busy ones (a sweep of
    JVMs: "13,007 samples (27.4%)" where 99.9% of the walks were cut; with --idle, 8.4%)."""
    walked = session.total_samples - session.stop_reason_counts().get(StopReason.REUSED.label, 0)
    if cut < WINDOW_NOTICE_MIN_SAMPLES or cut < WINDOW_NOTICE_SHARE * walked:
        return None
    return f"{cut:,} samples ({100 * cut / max(walked, cut):.1f}% of those walked)"


def stack_window_shortfall(session: Session, cap: int) -> str | None:
    """Say so when the stack window cut many native stacks short at its largest (``cap``), and what copies
    more: a deep recursion or a program with big stack frames loses its outermost native frames (``main``
    and what it called) in every such sample, which the profile shows as many shallow roots. The walks cut
    while a thread's window was still growing (``SeizedThread.widen``), its first few, are not counted:
    the window grew for them."""
    many = _many(session, session.counters.get("stack_window_at_cap", 0))
    return _limit_notice(many, f"the {cap:,} bytes copied per sample at most",
                         ("--max-stack-bytes", cap, MAX_STACK_BYTES, "copies more"))  # fmt: skip


def depth_limit_shortfall(session: Session, max_frames: int) -> str | None:
    """Say so when many native walks were cut at ``max_frames`` (a recursion deeper than that), and what
    goes deeper: like a window too small, it loses the outermost frames of every such sample."""
    return _limit_notice(_cut_short(session, StopReason.DEPTH_LIMIT), f"{max_frames:,} frames",
                         ("--max-frames", max_frames, MAX_FRAMES, "goes deeper"))  # fmt: skip


def _limit_notice(many: str | None, limit: str, option: tuple[str, int, int, str]) -> str | None:
    """The notice for ``many`` walks cut at a limit an option raises: ``option`` is (flag, value, its
    maximum, what four times the value does)."""
    if many is None:
        return None
    flag, value, maximum, does = option
    more = min(4 * value, maximum)
    remedy = f": {flag} {more} {does}, at more cost per sample" if more > value else ""
    return f"{many} had native stacks deeper than {limit}, so their outermost native frames are missing{remedy}"


def other_stack_samples(session: Session) -> str | None:
    """Say so when many walks ended at a signal frame whose interrupted code ran on another stack: a signal
    handler on an alternate signal stack. Only the stack the thread runs on is copied, so the callers of
    the code it interrupted are missing, whatever the window."""
    many = _cut_short(session, StopReason.OTHER_STACK)
    if many is None:
        return None
    return (
        f"{many} were taken in signal handlers running on an alternate signal stack (sigaltstack); nprof "
        "copies only the stack a thread runs on, so the callers of the code each handler interrupted are missing"
    )


def no_unwind_info(session: Session, modules: Sequence[Module]) -> str | None:
    """Say so when many walks stopped at code with neither CFI nor a frame-pointer frame to walk, and where:
    hand-written assembly without CFI directives, code built with ``-fno-asynchronous-unwind-tables`` and
    without frame pointers, JIT code in anonymous memory. Every such sample lacks all the callers of that
    code, which the profile shows only as a stack that starts there."""
    many = _cut_short(session, StopReason.NO_UNWIND_INFO)
    if many is None:
        return None
    where: Counter[str] = Counter()
    columns = session.frames.columns()
    kinds, module_of = columns["kind"], columns["module"]
    for (_thread, sid, stop, _cls), n in session.samples.items():
        if stop != StopReason.NO_UNWIND_INFO:
            continue
        outermost = next((f for f in session.stacks.frames(sid) if kinds[f] == FrameKind.NATIVE), None)
        mid = int(module_of[outermost]) if outermost is not None else -1
        module = modules[mid] if 0 <= mid < len(modules) else None
        where[os.path.basename(module.path) if module is not None and module.file_backed else
              (module.path if module is not None else "unknown code")] += n  # fmt: skip
    places = ", ".join(f"{name} ({n:,})" for name, n in where.most_common(3))
    return (
        f"{many} stopped at code with no unwind information and no frame-pointer frame, so their callers are "
        f"missing: in {places}. Code built with -fasynchronous-unwind-tables (gcc's default) or "
        "-fno-omit-frame-pointer unwinds; JIT code in anonymous memory ([anon:...]) needs frame pointers"
    )


#: the end of a recording warns about the cost of passing signals on above this many per second of
#: recording, and this many in all: a thread stops for each signal it receives until nprof passes it on,
#: ~30 us each here (a SIGSEGV-recovering loop: 268k recoveries a second untraced, ~30k recorded), so
#: at a thousand a second the target loses a few percent to them
SIGNAL_NOTICE_RATE = 1000
SIGNAL_NOTICE_MIN = 1000


def signal_cost(forwarded: int, duration: float) -> str | None:
    """A notice when the target received so many signals that passing them on slowed it: a traced thread
    stops at each signal it receives, until its tracer passes it on (ptrace(2), "Signal-delivery-stop").
    A program recovering from SIGSEGV in a loop did 268k recoveries a second untraced, 25-34k recorded,
    and nothing but a session counter said why."""
    if forwarded < SIGNAL_NOTICE_MIN or duration <= 0 or forwarded / duration < SIGNAL_NOTICE_RATE:
        return None
    return (f"the target received {forwarded:,} signals ({forwarded / duration:,.0f} a second), each of which "
            "stopped the thread it was sent to until nprof passed it on: a program that handles signals "
            "that often runs slower while recorded (ptrace's cost, as under strace or gdb)")


def untraced_threads(refused: Iterable[int]) -> str | None:
    """A notice naming the threads nprof could not seize (``SeizedThreads.refused``): another tracer had them,
    as ``strace -p TID`` or a debugger attached to one thread does, so the profile has none of their
    samples, and nothing else would say so. (A process traced as a whole is refused at the attach.)"""
    tids = sorted(refused)
    if not tids:
        return None
    parts = []
    for tid in tids[:8]:
        status = read_status(tid)
        if status is not None and status.tracer_pid:
            parts.append(f"{tid} (traced by {tracer_label(status.tracer_pid)})")
        else:
            parts.append(str(tid))
    more = f" and {len(tids) - 8} more" if len(tids) > 8 else ""
    return (f"{len(tids)} thread(s) could not be traced, so they have no samples: {', '.join(parts)}{more}. "
            "A thread has one tracer at a time: detach the other one (strace, gdb) to profile it")


#: how ``undetached_threads`` and ``unstopped_threads`` name the states of threads (proc(5) letters)
_STATE_WORDS = {DISK_SLEEP: "in uninterruptible sleep", "R": "running", "S": "asleep", "t": "in a tracing stop"}


def _thread_states(tids: list[int]) -> Counter[str]:
    """How many of the threads are in each state now (``gone``: exited)."""
    states: Counter[str] = Counter()
    for tid in tids:
        status = read_status(tid)
        states[status.state if status is not None else "gone"] += 1
    return states


def _states_said(states: Counter[str]) -> str:
    """The threads' states, most common first: "1 in uninterruptible sleep (D), 1 gone"."""
    return ", ".join(f"{n} gone" if state == "gone" else f"{n} {_STATE_WORDS.get(state, 'in state')} ({state})"
                     for state, n in states.most_common())  # fmt: skip


def undetached_threads(stuck: Iterable[int]) -> str:
    """A notice for the threads ``Tracer.detach_all`` could not detach, with their states ("1 in
    uninterruptible sleep (D)"): a thread must stop to be detached, and one in uninterruptible sleep stops
    for nothing. They were counted (``threads_not_detached``) and said to nobody (a sweep)."""
    tids = list(stuck)
    states = _states_said(_thread_states(tids))
    return (f"{len(tids)} thread(s) did not stop to be detached ({states}): they stay traced, each stopped "
            "where it next stops, until nprof exits, which lets them go")


#: why a thread in that state did not stop when asked, for ``unstopped_threads``
_WHY_UNSTOPPED = {
    DISK_SLEEP: "a thread in the kernel's uninterruptible sleep stops only when it wakes",
    # with more busy threads than CPUs, one waits its turn: 28 of 300 spinning threads on 2 CPUs, here
    "R": "a runnable thread stops only when the scheduler runs it, and this target had more busy threads than "
    "CPUs",
}


def unstopped_threads(unstopped: Iterable[int]) -> str:
    """A notice for the threads whose last stop asked never came (``Tracer.leave_to_thread_exit``), with
    their states and why such a one does not stop: one in uninterruptible sleep (a hung read, a vfork parent)
    stops for nothing, and with --idle it was missing from the profile without a word (a sweep); a runnable
    one waits for a CPU."""
    tids = list(unstopped)
    states = _thread_states(tids)
    why = "; ".join(reason for state, reason in _WHY_UNSTOPPED.items() if state in states)
    return (f"{len(tids)} thread(s) did not stop when last asked ({_states_said(states)}), and have no samples "
            f"from then on" + (f": {why}" if why else ""))


#: the end of a recording says Python frames were left unplaced when at least this many samples were, and
#: ``PLACEMENT_UNRELIABLE_SHARE`` of those with Python frames says the placement as a whole is unreliable:
#: a few samples caught as an eval loop is entered or left (``merge.py``) move no share in the profile
UNANCHORED_NOTICE_MIN = 1
PLACEMENT_UNRELIABLE_SHARE = 0.01


def unanchored_samples(session: Session) -> str | None:
    """Say so when samples had Python frames that could not be placed among their native frames (no
    eval-loop activation found for them by address or by name): they are shown above the native leaf
    under an ``[unanchored]`` frame, so their Python functions' totals hold and the C time under them
    is not theirs. Past a small share, the Python placement of the whole profile is called unreliable."""
    n = session.counters.get("merge_unanchored", 0) + session.counters.get("merge_mismatch", 0)
    if n < UNANCHORED_NOTICE_MIN:
        return None
    share = n / max(session.total_samples, n)
    text = (f"{n:,} samples ({100 * share:.1f}%) had Python frames that could not be placed among their native "
            "frames: each shows them above its native stack under an \"[unanchored]\" frame, so the C functions "
            "there were not called by them")
    if share >= PLACEMENT_UNRELIABLE_SHARE:
        return (f"the Python placement of this profile is unreliable: {text}. --no-native records the Python "
                "frames alone, correctly; please report this with `nprof dump --pid PID --json` of the target")
    return text


def unnamed_anchors(session: Session) -> str | None:
    """Say so when Python frames were placed at native frames that the interpreter's own full symbol table
    does not call its eval loop: the address of an activation's record and the names disagree, which
    is a bug of nprof's (``sampling/anchoring.py``)."""
    n = session.counters.get("python_anchor_unnamed", 0)
    if not n:
        return None
    return (f"{n:,} samples placed Python frames at a native frame the interpreter's symbols do not name as its "
            "eval loop; the profile may show them under the wrong C function. This is a bug in nprof: please "
            "report it with `nprof dump --pid PID --json` of the target")
