"""From one capture to one counted sample, after the thread was resumed: unwind the native stack, decode
the runtime's frames, merge them, intern the stack, classify the sample.

A profile revisits the same stacks, and everything after the unwind and the runtime decode depends only on
the frames: merge, anchor and lock-wait checks, building frame keys and interning run once per distinct
(native, runtime) stack of a process (``SampledProcess.stack_memo``).
"""

from __future__ import annotations

from profiler.config import SamplerConfig
from profiler.model import (
    FrameKind,
    NativeFrame,
    RuntimeFrame,
    SampleClass,
    StopReason,
    SyntheticFrame,
    UnwoundStack,
)
from profiler.profile.session import Session
from profiler.runtime import ActivationRecords
from profiler.sampling.anchoring import UNKNOWN, place
from profiler.sampling.merge import MergeOutcome, merge
from profiler.sampling.sampled_process import SampledProcess, SampledThread
from profiler.target import syscalls
from profiler.target.capture import Capture, SeizedThread
from profiler.unwind.sigframe import interrupted_registers
from profiler.unwind.stack import StackWindow

FrameKeys = tuple[tuple[int, int, int, int], ...]
#: samples in a row of a thread in the runtime's eval loop without its frames that have it stopped again:
#: the periodic walk of the thread lists finds a missed thread state within a second, 100 samples at 100 Hz
#: (docs/decisions/snapshot-then-settle.md)
RUNTIME_LOOKS = 100
#: merges that put every frame where it ran: counted by no counter
_EXACT = frozenset({MergeOutcome.EXACT, MergeOutcome.PLACED, MergeOutcome.NO_RUNTIME, MergeOutcome.REST,
                    MergeOutcome.OTHER_STACK})  # fmt: skip
#: merges made by the activations' records (``anchoring.py``), or by nothing
_NOT_BY_NAME = frozenset({MergeOutcome.PLACED, MergeOutcome.PLACED_TRUNCATED, MergeOutcome.UNANCHORED})


def dwarf_registers(capture: Capture) -> list[int]:
    """The capture's registers in DWARF order (model.py): rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8-r15, rip."""
    r = capture.slot.regs
    return [r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp,
            r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rip]  # fmt: skip


class StackRecorder:
    """Turns captures into the session's samples."""

    def __init__(self, session: Session, config: SamplerConfig) -> None:
        self.session = session
        self.native = config.native
        self.first_window, self.window_cap = config.stack_bytes, config.window_cap

    def record(self, target: SampledProcess, state: SampledThread, capture: Capture) -> None:
        """Unwind, merge, classify and count one capture."""
        session = self.session
        r = capture.slot.regs
        state.sampled()
        state.fs_base = r.fs_base
        if capture.thread.group_stopped:  # stopped by job control: its registers say where, not that it runs
            cls = SampleClass.IDLE
        else:
            cls = SampleClass.BLOCKED if syscalls.waiting(r) else SampleClass.RUNNING
        self._track_stack_mapping(target, capture.thread, r.rsp)
        native: list[NativeFrame] = []
        stop = StopReason.NO_STACK_COPY
        placed: tuple[int, ...] = ()
        runtime = self._runtime_frames(target, capture)
        if self.native:
            if capture.stack_len < 0:
                session.count("stack_read_errors")
            window = _window(capture)
            unwound = self.unwind(target, capture, window)
            native, stop = unwound.frames, unwound.stop
            if stop is StopReason.WINDOW_EXHAUSTED:
                self._widen(capture.thread)
            if runtime and target.caps.records is not None:
                placed = self._place(target.caps.records, capture, window, unwound)
        memo_key = (tuple(native), tuple(runtime), stop, placed)
        hit = target.stack_memo.get(memo_key)
        if hit is None:
            hit = self._stack_id(target, native, runtime, stop, placed)
            target.stack_memo.put(memo_key, hit, len(native) + len(runtime))
        sid, in_gil_wait, counted, runs_runtime = hit
        for counter in counted:
            session.count(counter)
        if runs_runtime or state.runtime_missed:
            self._look_again_for_runtime(state, runs_runtime and not runtime)
        if cls is not SampleClass.IDLE:  # (a job-control stop: neither waiting nor holding)
            lock, data = target.caps.lock, capture.agent_data
            if in_gil_wait:
                cls = SampleClass.GIL_WAIT
            elif runtime and lock is not None and data is not None and lock.holds_gil(data):
                cls = SampleClass.GIL_HELD
        state.last_stack, state.last_stop, state.last_class = sid, stop, cls
        session.add_sample(state.index, sid, stop, cls)

    @staticmethod
    def _look_again_for_runtime(state: SampledThread, missed: bool) -> None:
        """A sample whose native stack runs the runtime's eval loop but which has none of its frames (its
        thread state was not found in the stop, nor by the walk ``settle`` made at once) is not counted again
        for as long as the thread sleeps: its next idle check stops it again (``look_again``), up to
        ``RUNTIME_LOOKS`` samples in a row."""
        if not missed:
            state.runtime_missed = 0
            return
        state.runtime_missed += 1
        if state.runtime_missed <= RUNTIME_LOOKS:
            state.look_again()

    def unwind(self, target: SampledProcess, capture: Capture, window: StackWindow | None = None) -> UnwoundStack:
        """The native frames of one capture. A walk that went past a signal frame onto a stack not copied
        learns that it is the thread's own (``_learn_home_stack``): its next copies take it too. The walk is
        kept under the thread's key, so that its next one takes over its outer frames (``unwind/reuse.py``):
        a dump's held walks take over those of its brief stops before the hold (``learn``)."""
        if window is None:
            window = _window(capture)
        regs = dwarf_registers(capture)
        if capture.after_signal:  # maybe stopped at its handler's entry: sampled where the signal came
            interrupted = interrupted_registers(regs, window, capture.after_signal)
            if interrupted is not None:
                regs = interrupted
                self.session.count("samples_at_handler_entry")
        unwound = target.unwinder.unwind(regs, window, capture.thread.key)
        if unwound.other_sp:
            self._learn_home_stack(target, capture.thread, unwound.other_sp)
        return unwound

    def _widen(self, record: SeizedThread) -> None:
        """The thread's stack went on past its window: its next copies take twice as much, up to the cap.
        A walk cut at the cap is counted: raising the cap is what would have helped it (``notices.py``)."""
        if record.widen(self.first_window, self.window_cap):
            self.session.count("stack_windows_widened")
        else:
            self.session.count("stack_window_at_cap")

    def learn(self, target: SampledProcess, capture: Capture) -> None:
        """Learn from one capture what its thread's next copies need, without counting a sample: the stack
        mapping it stopped on, its own stack, and the unwind tables of the modules on it."""
        self._track_stack_mapping(target, capture.thread, capture.slot.regs.rsp)
        self.unwind(target, capture)

    def _place(
        self, records: ActivationRecords, capture: Capture, window: StackWindow, unwound: UnwoundStack
    ) -> tuple[int, ...]:
        """The native frame of each group of the capture's runtime frames, by the stack address of its
        activation's record (``anchoring.py``); () where the agent knows none."""
        if capture.agent_data is None:
            return ()
        try:
            marks = records.activations(capture.agent_data, window)
        except Exception:  # an agent bug costs this sample its placement by address, not the recording
            self.session.count("agent_decode_errors")
            return ()
        if not marks:
            return ()
        frames = unwound.frames
        return place(unwound.sps, len(frames), marks, unwound.stop == StopReason.END_OF_STACK)

    def _stack_id(
        self,
        target: SampledProcess,
        native: list[NativeFrame],
        runtime: list[RuntimeFrame],
        stop: StopReason,
        placed: tuple[int, ...] = (),
    ) -> tuple[int, bool, tuple[str, ...], bool]:
        """The stack id of one distinct stack; whether it is inside the runtime's lock wait (``take_gil``);
        the counters each of its samples adds to: the merge's, if it was not exact, and
        ``python_anchor_unnamed`` where a group was placed by address at a frame that the agent's complete
        names do not call an eval loop (the cross-check of the two: ``anchoring.py``); whether it runs the
        runtime's eval loop (an anchor is on it)."""
        keys, outcome = self._keys(target, native, runtime, stop, placed)
        # (with no runtime frame too: a thread about to run its first Python code, or a C thread calling into
        # Python through PyGILState_Ensure, waits in take_gil before it has a frame)
        in_gil_wait = any(target.flags(f)[1] for f in native)
        counted: tuple[str, ...] = () if outcome in _EXACT else (f"merge_{outcome.name.lower()}",)
        if placed and outcome not in _NOT_BY_NAME and any(p != UNKNOWN for p in placed):
            counted += ("python_placed_by_name",)  # the records could not be used: names placed the frames
        records = target.caps.records
        if records is not None and records.anchors_complete and any(
            i >= 0 and not target.flags(native[i])[0] for i in placed
        ):
            counted += ("python_anchor_unnamed",)
        runs_runtime = target.agent is not None and any(target.flags(f)[0] for f in native)
        return self.session.intern_stack(keys), in_gil_wait, counted, runs_runtime

    def _runtime_frames(self, target: SampledProcess, capture: Capture) -> list[RuntimeFrame]:
        if target.agent is None or capture.agent_data is None:
            return []
        try:
            return target.agent.frames(capture.agent_data)
        except Exception:  # an agent bug costs this sample its runtime frames, not the recording
            self.session.count("agent_decode_errors")
            return []

    def _keys(
        self,
        target: SampledProcess,
        native: list[NativeFrame],
        runtime: list[RuntimeFrame],
        stop: StopReason,
        placed: tuple[int, ...] = (),
    ) -> tuple[FrameKeys, MergeOutcome]:
        ai = target.agent_index
        if not runtime:
            if not self.native:  # --no-native, a thread running no Python: one labelled frame (model.py)
                return ((FrameKind.SYNTHETIC, 0, SyntheticFrame.NATIVE_ONLY, 0),), MergeOutcome.NO_RUNTIME
            return tuple((FrameKind.NATIVE, f.module, f.rel, 0) for f in native), MergeOutcome.NO_RUNTIME
        if not self.native:  # --no-native: the runtime's frames alone, nothing to merge with
            keys = tuple((FrameKind.RUNTIME, ai, f.code, f.offset) for f in runtime if not f.shim)
            return keys, MergeOutcome.NO_RUNTIME
        anchors = [target.flags(f)[0] for f in native]
        frames, outcome = merge(native, anchors, runtime, stop == StopReason.END_OF_STACK,
                                lambda i: target.is_coroutine_base(native[i]), placed)  # fmt: skip
        keys = tuple(
            (FrameKind.NATIVE, f.module, f.rel, 0)
            if isinstance(f, NativeFrame)
            else (FrameKind.RUNTIME, ai, f.code, f.offset)
            if isinstance(f, RuntimeFrame)
            else (FrameKind.SYNTHETIC, 0, f.kind, 0)
            for f in frames
        )
        return keys, outcome

    def _learn_home_stack(self, target: SampledProcess, record: SeizedThread, sp: int) -> None:
        """A walk went past a signal frame onto a stack that was not copied: that is the thread's own stack
        (the first sample's, taken for it, was the alternate one), and its next stops off it copy it too."""
        region = _stack_region(target, sp)
        if region is not None:
            record.home_lo, record.home_hi = region

    def _track_stack_mapping(self, target: SampledProcess, record: SeizedThread, rsp: int) -> None:
        """Remember the stack mapping holding rsp, so the next copy stops at its end."""
        if record.stack_lo <= rsp < record.stack_hi:
            return
        region = _stack_region(target, rsp)
        if region is None:
            # its stack was unmapped since its stop, maps read again included: glibc frees a thread's stack
            # once it has exited (at its join, or into its stack cache), which is no error of nprof's. One
            # thread of 265 in 1.5 s of a 3.12 ThreadPoolExecutor per batch (pool_churn.py) counted as one.
            exited = record.gone or record.proc.exited()
            self.session.count("stack_unmapped_after_exit" if exited else "stack_outside_mappings")
            return
        lo, hi = record.stack_lo, record.stack_hi = region
        if not record.home_hi:  # the thread's own stack: the first one seen
            record.home_lo, record.home_hi = lo, hi
        elif hi == record.home_hi and lo < record.home_lo:  # the same stack, grown down
            record.home_lo = lo


def _window(capture: Capture) -> StackWindow:
    """The capture's copy of its stack, and of its own stack where it stopped on another (``home``)."""
    home = StackWindow(capture.home, capture.home_base, False) if capture.home_len else None
    return StackWindow(capture.stack, capture.stack_base, capture.window_full, home)


def _stack_region(target: SampledProcess, sp: int) -> tuple[int, int] | None:
    """``[start of the mapping holding sp, end of the run of mappings it starts)``: a stack's extent (the
    maps are read again if none holds sp)."""
    maps = target.process.maps
    mapping = maps.find(sp)
    if mapping is None:
        maps = target.process.refresh_maps()
        mapping = maps.find(sp)
    end = maps.region_end(sp) if mapping is not None else None
    return (mapping.start, end) if mapping is not None and end is not None else None
