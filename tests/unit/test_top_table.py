"""The table of top functions at the end of a recording: its totals, its labels, and what it says when there is
nothing to put in it."""

from __future__ import annotations

import pytest

from profiler.cli.status import short_label, top_table
from profiler.config import ExportConfig
from profiler.profile.session import Session, SessionMeta
from profiler.tree.calltree import command_line


def test_threads_that_slept_through_the_recording_are_explained():
    """A process asleep for the whole recording has no sample at all without --idle (its threads are not
    stopped, and have no stack to count again): 'No samples to show (--idle to include)' sent users to a
    report --idle that was just as empty."""
    session = Session(SessionMeta(pid=7, command=["sleeper"]))
    session.thread_index(7, 7, 1, "sleeper")
    assert top_table(session, ExportConfig()).startswith("No samples: every thread slept for the whole recording")
    session.meta.idle_stacks = True  # recorded with --idle: they would have been stopped and counted
    assert top_table(session, ExportConfig()) == "No samples to show (idle excluded, --idle to include)."


def test_a_command_line_is_one_line_cut_only_when_asked():
    """A ``python -c`` program's newlines broke the status line and dump's header across lines."""
    argv = ["python3", "-c", "import time\nwhile True:\n    time.sleep(1)"]
    assert command_line(argv) == "python3 -c import time while True: time.sleep(1)"
    assert command_line(argv, 16) == "python3 -c im..."


#: a PyTorch kernel's name as the demangler gives it (1,133 characters in a top table before)
TORCH_KERNEL = (
    "void at::internal::invoke_parallel<at::parallel_for<at::native::(anonymous namespace)::cpu_max_pool<float, "
    "false>(at::Tensor const&, c10::ArrayRef<long>)::{lambda(long, long)#1}>(long, long, long, "
    "at::native::(anonymous namespace)::cpu_max_pool<float, false>(at::Tensor const&, c10::ArrayRef<long>)::"
    "{lambda(long, long)#1} const&)::{lambda(long, long)#1}>(long, long, long, at::parallel_for<...>(long, long, "
    "long, at::native::(anonymous namespace)::cpu_max_pool<float, false>(at::Tensor const&)::{lambda(long, long)#1}"
    " const&)::{lambda(long, long)#1} const&)._omp_fn.0 (libtorch_cpu.so)"
)


@pytest.mark.parametrize(
    "label, short",
    [
        (TORCH_KERNEL, "void at::internal::invoke_parallel<…>(…)._omp_fn.0 (libtorch_cpu.so)"),
        ("<module> (app.py:1)", "<module> (app.py:1)"),  # short enough: as it is
        ("outer.<locals>.inner_" + "y" * 90 + " (/src/app.py:12)",
         "outer.<locals>.inner_" + "y" * 61 + "… (/src/app.py:12)"),  # Python's brackets are not templates
        ("std::set<int>::operator<(std::set<int> const&) const" + "_" * 55 + " (libx.so)",
         "std::set<…>::operator<(…) const" + "_" * 55 + " (libx.so)"),
    ],
)
def test_a_long_function_label_is_shortened_for_the_table(label, short):
    assert short_label(label) == short and len(short) <= 100


def test_a_function_named_like_its_module_keeps_the_module_in_its_label():
    """Only an unnamed address ("libz.so.1+0x5d80") already says its module: a function whose name merely
    contains the module's ("spin_leaf" in "spin") was shown without it, beside "worker (spin)" (a sweep)."""
    from profiler.model import FrameInfo
    from profiler.tree.totals import function_label

    assert function_label(FrameInfo("spin_leaf", module="spin")) == "spin_leaf (spin)"
    assert function_label(FrameInfo("libz.so.1+0x5d80", module="libz.so.1")) == "libz.so.1+0x5d80"


def _display_by_definition(session: Session, fids: list[int], keep, hide_startup: bool = False) -> list:
    """What a stack shows, frame by frame as ``StackDisplays`` defines it: each frame's function, then the
    calls inlined at it, each left out where ``keep`` says so; an interpreter frame's inlined calls come after
    the runtime frames interleaved right after it. With ``hide_startup``, where the first frame that is not
    native is a runtime frame, the start-up frames before it are left out, and their inlined calls but for
    those deferred."""
    from profiler.model import FrameKind
    from profiler.tree.display import frame_info

    kinds = session.frames.kinds()
    runtime = [int(kinds[fid]) == FrameKind.RUNTIME for fid in fids] + [False]
    first = next((i for i, fid in enumerate(fids) if int(kinds[fid]) != FrameKind.NATIVE), None)
    outward = first if hide_startup and first is not None and runtime[first] else 0
    out, deferred = [], []
    for i, fid in enumerate(fids):
        if deferred and not runtime[i]:
            out, deferred = out + deferred, []
        frame = frame_info(session, fid)
        hidden = i < outward and frame.startup
        if keep(frame) and not hidden:
            out.append((fid, frame))
        calls = [(fid, f) for f in session.inlined.get(fid, ()) if keep(f)]
        if frame.interpreter and runtime[i + 1]:
            deferred = calls
        elif not hidden:
            out += calls
    return out + deferred


def mechanism_by_definition(session: Session, shown: list) -> tuple:
    """The mechanism a displayed stack's leaf ran for, and its innermost runtime frame (or None), one frame
    at a time from the leaf: the first frame of a mechanism decides, unless a runtime frame of none comes
    first; waiting for the GIL inside a lock release is a hand-off."""
    from profiler.model import FrameKind, Mechanism
    from profiler.tree.mechanics import is_lock_release

    kinds = session.frames.kinds()
    runtime = [f for fid, f in shown if int(kinds[fid]) == FrameKind.RUNTIME]
    released = False
    for fid, frame in reversed(shown):
        if frame.mechanism is not None:
            if frame.mechanism is Mechanism.GIL_WAIT and released:
                return Mechanism.GIL_HANDOFF, (runtime or [None])[-1]
            return frame.mechanism, (runtime or [None])[-1]
        if int(kinds[fid]) == FrameKind.RUNTIME:
            break
        released = released or is_lock_release(frame)
    return None, (runtime or [None])[-1]


def _totals_one_stack_at_a_time(session: Session, config: ExportConfig) -> tuple[list, int]:
    """``function_totals`` as its definition says it, one displayed stack at a time (what it did before it
    worked over the prefix tree)."""
    from collections import Counter

    from profiler.tree.calltree import frame_filter, stack_counts
    from profiler.tree.mechanics import label
    from profiler.tree.totals import FunctionTotal, function_label

    keep = frame_filter(config)
    self_n: Counter[str] = Counter()
    total_n: Counter[str] = Counter()
    python_n: Counter[str] = Counter()
    lines = {}
    samples = 0
    for per in stack_counts(session, config).values():
        for sid, n in per.items():
            shown = _display_by_definition(session, session.stacks.frames(sid), keep, config.hide_interpreter)
            labels = [function_label(f) for _fid, f in shown]
            if labels:
                samples += n
                mechanism, innermost = mechanism_by_definition(session, shown)
                groups = {label(f.mechanism) for _fid, f in shown if f.mechanism is not None}
                lines.update({label(f.mechanism): f.mechanism for _fid, f in shown if f.mechanism is not None})
                if mechanism is not None:
                    groups.add(label(mechanism))
                    lines[label(mechanism)] = mechanism
                self_n[labels[-1] if mechanism is None else label(mechanism)] += n
                total_n.update({label_: n for label_ in set(labels) | groups})
                if innermost is not None:
                    python_n[label(innermost.mechanism) if innermost.mechanism else function_label(innermost)] += n
    totals = [FunctionTotal(name, self_n[name], total, python_n[name], lines.get(name))
              for name, total in total_n.items()]  # fmt: skip
    return sorted(totals, key=lambda t: (-t.self_samples, -t.total_samples, t.label)), samples


def _random_session(seed: int, mechanisms: bool = False) -> Session:
    """Native frames (some with inlined calls, some the interpreter's own, hidden with --hide-interpreter, some
    start-up code, hidden outward of the first runtime frame), runtime frames and markers, with recursion,
    several threads and idle samples; a quarter of the stacks start with start-up frames. With
    ``mechanisms``, some frames and inlined calls of each runtime mechanism, and some lock releases."""
    import random

    from profiler.model import FrameInfo, FrameKind, Mechanism, SampleClass, StopReason

    rng = random.Random(seed)
    session = Session(SessionMeta(pid=7, command=["x"]))
    threads = [session.thread_index(7, tid, 1, f"t{tid}") for tid in (7, 8, 9)]
    keys, info = [], []
    kinds = list(Mechanism)
    for i in range(30):
        kind = FrameKind.RUNTIME if i % 3 == 0 else FrameKind.SYNTHETIC if i == 29 else FrameKind.NATIVE
        keys.append((kind, 0, 0x1000 + i, 0))
        interpreter = kind == FrameKind.NATIVE and i % 5 == 1
        mechanism = kinds[i % 4] if mechanisms and i % 7 == 2 else None
        if mechanisms and kind == FrameKind.RUNTIME and i % 9 == 0:
            mechanism = Mechanism.IMPORT  # importlib's frames
        name = "__GI___lll_lock_wake" if mechanisms and i % 7 == 4 and kind == FrameKind.NATIVE else f"f{i % 24}"
        startup = kind == FrameKind.NATIVE and i % 4 == 1
        info.append(FrameInfo(name, file="a.py" if kind == FrameKind.RUNTIME else None,
                              module=None if kind != FrameKind.NATIVE else "m.so", interpreter=interpreter,
                              mechanism=mechanism, startup=startup))  # fmt: skip
    starts = [k for k, f in zip(keys, info) if f.startup]
    for _ in range(300):
        depth = rng.randint(1, 12)
        head = tuple(rng.choice(starts) for _ in range(rng.randint(1, 4))) if rng.random() < 0.25 else ()
        # (innermost first: the start-up frames go last, outermost)
        sid = session.intern_stack(tuple(rng.choice(keys) for _ in range(depth)) + head)
        cls = rng.choice([SampleClass.RUNNING, SampleClass.RUNNING, SampleClass.IDLE, SampleClass.GIL_HELD])
        session.add_sample(rng.choice(threads), sid, StopReason.END_OF_STACK, cls, rng.randint(1, 5))
    session.frame_info = [info[keys.index(session.frames.key(fid))] for fid in range(len(session.frames))]
    for fid in range(len(session.frames)):
        if fid % 4 == 1 and int(session.frames.kinds()[fid]) == FrameKind.NATIVE:
            mechanism = kinds[fid % 3] if mechanisms and fid % 3 else None
            session.inlined[fid] = [FrameInfo(f"inl{fid}", module="m.so", inlined=True,
                                              interpreter=fid % 8 == 1, mechanism=mechanism)]  # fmt: skip
    return session


CONFIGS = [ExportConfig(), ExportConfig(hide_interpreter=True), ExportConfig(idle=True)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("mechanisms", [False, True], ids=["functions", "mechanisms"])
def test_function_totals_over_the_prefix_tree_are_those_of_each_stack_shown(seed, config, mechanisms):
    """The totals computed level by level over the tree are those of each stack as it is shown, the leaf
    included where an interpreter frame's inlined calls are shown after the runtime frames it runs; so are
    the mechanisms' lines and the Python self column."""
    from profiler.tree.totals import function_totals

    session = _random_session(seed, mechanisms)
    totals, samples = function_totals(session, config)
    assert (totals, samples) == _totals_one_stack_at_a_time(session, config)
    assert any(t.python_samples for t in totals), "no Python self to compare"
    if mechanisms:
        lines = {t.mechanism for t in totals if t.self_samples and t.mechanism is not None}
        assert len(lines) >= 2, f"too few mechanisms decided a leaf to compare: {lines}"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("config", CONFIGS[:2])
def test_stack_displays_are_those_of_the_definition(seed, config):
    """``StackDisplays`` (per-frame work done once per frame id; frame ids read from the tree a level at a
    time for many stacks) shows every stack as the definition does, frame by frame; in chunks too."""
    from profiler.tree import calltree, display

    session = _random_session(seed)
    keep = calltree.frame_filter(config)
    displays = display.StackDisplays(session, keep, hide_startup=config.hide_interpreter)
    sids = list(range(len(session.stacks)))[::-1]
    expected = [_display_by_definition(session, session.stacks.frames(sid), keep, config.hide_interpreter)
                for sid in sids]  # fmt: skip
    shown = [[(displays.origin[d], displays.infos[d]) for d in ids] for ids in displays.many(sids)]
    assert shown == expected
    if config.hide_interpreter:
        assert any(len(e) < len(session.stacks.frames(sid)) for e, sid in zip(expected, sids)), "nothing hidden"
    display.PATHS_CHUNK, chunk = 7, display.PATHS_CHUNK
    try:
        assert [[(displays.origin[d], displays.infos[d]) for d in ids] for ids in displays.many(sids)] == expected
    finally:
        display.PATHS_CHUNK = chunk
