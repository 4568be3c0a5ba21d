"""The end-of-recording notices about walks cut short: when they are given, and what they advise."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from profiler.model import FrameKind, Module, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.sampling.notices import (
    depth_limit_shortfall,
    no_unwind_info,
    other_stack_samples,
    rate_shortfall,
    signal_cost,
    stack_window_shortfall,
    unstopped_threads,
)  # fmt: skip
from profiler.sampling.processes import SampledProcesses
from profiler.sampling.sampled_process import SampledProcess
from profiler.target.maps import Mapping, MappingIndex


def session_with(reason: StopReason, cut: int, total: int) -> Session:
    session = Session(SessionMeta(pid=1, command=["prog"]))
    thread = session.thread_index(1, 1, 1, "main")
    sid = session.intern_stack(((FrameKind.NATIVE, 0, 0x10, 0),))
    session.add_sample(thread, sid, reason, SampleClass.RUNNING, cut)
    session.add_sample(thread, sid, StopReason.END_OF_STACK, SampleClass.RUNNING, total - cut)
    return session


def cut_at_the_cap(cut: int, total: int) -> Session:
    """``cut`` of ``total`` walks stopped at the window's end with the window at its cap (the rest counted
    as cut while their thread's window still grew: ``StackRecorder._widen``)."""
    session = session_with(StopReason.WINDOW_EXHAUSTED, cut + 3, total)
    session.count("stack_window_at_cap", cut)
    return session


def test_window_and_depth_notices_suggest_four_times_the_limit():
    window = stack_window_shortfall(cut_at_the_cap(50, 100), 4096)
    assert window is not None and window.startswith("50 samples (50.0% of those walked)"), window
    assert "deeper than the 4,096 bytes copied per sample at most" in window and "--max-stack-bytes 16384" in window
    depth = depth_limit_shortfall(session_with(StopReason.DEPTH_LIMIT, 50, 100), 2048)
    assert depth is not None and "deeper than 2,048 frames" in depth and "--max-frames 8192" in depth
    at_most = depth_limit_shortfall(session_with(StopReason.DEPTH_LIMIT, 50, 100), 65536)
    assert at_most is not None and "--max-frames" not in at_most, "no remedy beyond the maximum"


def test_notices_need_one_percent_and_ten_samples():
    assert stack_window_shortfall(cut_at_the_cap(9, 20), 4096) is None
    assert stack_window_shortfall(cut_at_the_cap(10, 2000), 4096) is None
    assert stack_window_shortfall(session_with(StopReason.WINDOW_EXHAUSTED, 50, 100), 4096) is None, (
        "walks cut while the window grew, none at the cap: it grew for them"
    )
    assert other_stack_samples(session_with(StopReason.OTHER_STACK, 10, 100)) is not None
    assert other_stack_samples(session_with(StopReason.WINDOW_EXHAUSTED, 10, 100)) is None


def test_a_share_of_walks_cut_leaves_out_samples_counted_without_a_walk():
    """Idle threads' samples repeat their last stack without a walk (stop reason "reused"): counted in the
    share, 100 busy walks all cut beside 9,900 idle samples were 1% and said nothing; with 20,000, the
    notice would have said 0.5%."""
    session = session_with(StopReason.DEPTH_LIMIT, 100, 100)
    idle = session.thread_index(1, 2, 1, "sleeper")
    sid = session.intern_stack(((FrameKind.NATIVE, 0, 0x20, 0),))
    session.add_sample(idle, sid, StopReason.REUSED, SampleClass.IDLE, 20_000)
    depth = depth_limit_shortfall(session, 2048)
    assert depth is not None and depth.startswith("100 samples (100.0% of those walked)"), depth


def test_walks_stopped_without_unwind_info_name_the_code_they_stopped_in():
    """Where the walk stopped is the outermost native frame of the stack: its module is named, file-backed
    ones by their file name, the busiest first."""
    session = session_with(StopReason.NO_UNWIND_INFO, 30, 100)
    modules = [Module(0, "[anon:7f00]", None, 0, 0x1000, 0, False), Module(1, "/opt/lib/libasm.so", None, 0, 0, 0)]
    thread = session.thread_index(1, 1, 1, "main")
    deeper = session.intern_stack(((FrameKind.NATIVE, 0, 0x10, 0), (FrameKind.NATIVE, 1, 0x20, 0)))
    session.add_sample(thread, deeper, StopReason.NO_UNWIND_INFO, SampleClass.RUNNING, 12)
    notice = no_unwind_info(session, modules)
    assert notice is not None and notice.startswith("42 samples (37.5% of those walked)")
    assert "in [anon:7f00] (30), libasm.so (12)" in notice
    assert no_unwind_info(session_with(StopReason.NO_UNWIND_INFO, 5, 100), modules) is None


def test_a_process_found_exiting_at_its_last_detection_look_is_counted_not_reported():
    """A pool's forked worker that ends as its detection's grace period does has nothing mapped at that
    look, and was reported "not a CPython process" (11 times in a 20 s recording of a pool with
    ``maxtasksperchild=1``). It is counted as exited before its detection; one with maps is reported."""
    told: list[str] = []
    processes = object.__new__(SampledProcesses)
    processes.session = Session(SessionMeta(pid=1, command=["python"]))
    processes.notice = told.append
    processes.config = SimpleNamespace(native=True)

    def target(mappings: list[Mapping]) -> SimpleNamespace:
        process = SimpleNamespace(pid=7, comm="python", maps=MappingIndex(mappings))
        reasons = ["no libpython or python executable mapped: not a CPython process"]
        return SimpleNamespace(process=process, detect_until=1.0, detect_reasons=reasons,
                               no_runtime_notice=lambda native: "pid 7 (python): " + reasons[0])  # fmt: skip

    processes._no_runtime(target([]))
    assert told == [] and processes.session.counters == {"processes_exited_before_detection": 1}
    processes._no_runtime(target([Mapping(0x1000, 0x2000, "r-xp", 0, 1, "/usr/bin/cat")]))
    assert told == ["pid 7 (python): no libpython or python executable mapped: not a CPython process"]


def test_a_rate_not_kept_is_told_with_what_was_achieved_and_why():
    """Ticks that took longer than the shortest jittered interval (half a period): nprof's work is why."""
    assert rate_shortfall(ticks=8848, missed=11152, rate=20000, tick_seconds=8848 * 110e-6) == (
        "sampled at 8,848 Hz, not the 20,000 Hz asked: 56% of the ticks due were skipped, as nprof ran late: a "
        "tick (stopping, copying and unwinding the threads due) took 0.11 ms on average, for a period of 0.05 ms; "
        "a lower -r/--rate gives evenly spaced samples"
    )
    assert rate_shortfall(ticks=960, missed=40, rate=1000, tick_seconds=0.2) is None  # kept up (a late tick)
    assert rate_shortfall(ticks=20, missed=80, rate=1000, tick_seconds=1.0) is None  # too short to tell


def test_ticks_skipped_while_they_took_little_blame_the_machine_not_the_rate():
    """Ticks well within their period that still ran late: nprof's thread waited for a CPU, which a lower
    rate does not help (a recording on a machine at load 18 on 2 CPUs)."""
    notice = rate_shortfall(ticks=136, missed=64, rate=100, tick_seconds=136 * 0.4e-3, load=(18.27, 2))
    assert notice == (
        "sampled at 68 Hz, not the 100 Hz asked: 32% of the ticks due were skipped, as nprof ran late: a tick took "
        "0.4 ms on average, well within the 10 ms period, but nprof's thread waited to run: the machine was busy "
        "(load average 18.3 on 2 CPUs)"
    )


def test_a_target_whose_threads_sleep_gets_no_rate_notice():
    """Ticks taken on time, however few samples the sleeping threads gave and however long the recording
    lasted around them: 'sampled at 53 Hz ... could not keep up' was said of an idle web app (issue 44)."""
    assert rate_shortfall(ticks=199, missed=0.0, rate=100, tick_seconds=199 * 50e-6) is None


def test_a_signal_heavy_target_is_told_what_passing_signals_on_costs():
    assert signal_cost(0, 2.0) is None
    assert signal_cost(1_500, 2.0) is None, "750 a second: a few percent at most, not worth a word"
    assert signal_cost(900, 0.5) is None, "too few in all to tell"
    notice = signal_cost(60_000, 2.0)
    assert notice is not None and "60,000 signals (30,000 a second)" in notice


def test_a_process_profiled_natively_is_looked_at_again_only_when_it_maps_new_code_files():
    """``SampledProcess.loaded_since``: a runtime is looked for again once a new file of code is mapped (a dlopen of
    libpython), not at every change of the code mapped (a JIT's anonymous mappings come and go all the
    time), and once per new file."""
    maps = [Mapping(0x1000, 0x2000, "r-xp", 0, 1, "/usr/bin/host")]
    process = SimpleNamespace(maps=MappingIndex(maps))
    space = SimpleNamespace(generation=0)
    target = object.__new__(SampledProcess)
    target.agent, target.process, target.space = None, process, space
    target._looked_at = (0, target._code_files())
    assert not target.loaded_since(), "nothing changed"
    space.generation = 1
    maps.append(Mapping(0x3000, 0x4000, "rwxp", 0, 0, ""))
    process.maps = MappingIndex(maps)
    assert not target.loaded_since(), "a new anonymous mapping is no new file"
    space.generation = 2
    maps.append(Mapping(0x5000, 0x6000, "r-xp", 0, 2, "/usr/lib/libpython3.12.so.1.0"))
    process.maps = MappingIndex(maps)
    assert target.loaded_since() and not target.loaded_since(), "told once"
    space.generation = 3
    assert not target.loaded_since(), "the same files"


def test_a_runtime_loaded_since_the_attach_that_nprof_cannot_read_is_told():
    """A process that loads a libpython nprof does not read (3.7) after the attach: the look that finds it
    says why it is still profiled natively, where the notice at the attach said "not a CPython process"
    and nothing more was said; a look that finds nothing new says nothing."""
    told: list[str] = []
    processes = object.__new__(SampledProcesses)
    processes.notice = told.append
    processes.config = SimpleNamespace(native=True)
    agent = SimpleNamespace(name="cpython", last_reason="not a CPython process (no libpython mapped, and host "
                            "exports no _PyRuntime)", detect=lambda process: None)  # fmt: skip
    processes.agents = [agent]
    maps = [Mapping(0x1000, 0x2000, "r-xp", 0, 1, "/usr/bin/host")]
    process = SimpleNamespace(pid=7, comm="host", maps=MappingIndex(maps))
    target = object.__new__(SampledProcess)
    target.agent, target.process, target.space, target.detect_until = None, process, SimpleNamespace(generation=0), 0
    target.detect(processes.agents, lambda session, pid: 0)
    processes.targets = {7: target}
    target.space.generation = 1
    process.maps = MappingIndex([*maps, Mapping(0x5000, 0x6000, "r-xp", 0, 2, "/usr/lib/libplugin.so")])
    processes._detect_loaded_later()
    assert told == [], "the same reason: nothing new to say"
    agent.last_reason = "CPython 3.7 is not supported (nprof reads 3.8 to 3.14)"
    target.space.generation = 2
    libpython = Mapping(0x7000, 0x8000, "r-xp", 0, 3, "/lib/libpython3.7m.so")
    process.maps = MappingIndex([*process.maps.mappings, libpython])
    processes._detect_loaded_later()
    assert told == ["pid 7 (host): CPython 3.7 is not supported (nprof reads 3.8 to 3.14); profiling native frames"]


def test_threads_that_did_not_stop_are_told_why_for_their_state():
    """A runnable thread waits for a CPU (a target with more busy threads than CPUs), not in uninterruptible
    sleep, which the notice said of every thread before."""
    running = threading.get_native_id()  # this thread, which is running as its state is read
    said = unstopped_threads([running, 2**22 + 1])  # (above pid_max's default: gone)
    assert said.startswith("2 thread(s) did not stop when last asked (1 running (R), 1 gone)"), said
    assert "runnable thread stops only when the scheduler runs it" in said
    assert "uninterruptible" not in said
    assert unstopped_threads([2**22 + 1]).endswith("have no samples from then on")
