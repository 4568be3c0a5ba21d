"""The per-frame unwinding policy: which method produces each frame, and when a walk stops.

Per frame: **CFI** where the module's unwind table has a row for the pc (``cfi.py``); else **frame
pointers**, with prologue analysis for the innermost frame (``framepointer.py``); else, where that fails its
checks or leads out of every module, a **stack scan** checked with capstone (``scan.py``). File-less code
gets a known trampoline's fixed frame (``trampolines.py``). Callers are looked up at their return address
minus one; the innermost frame and a frame a signal interrupted, at their pc. Each frame records its
``UnwindMethod`` and each walk its ``StopReason``; a walk takes over the previous walk's outer frames where
they still hold (``reuse.py``) and reads only the saved registers some rule uses (``registers_read.py``).
The reasons: docs/decisions/unwind-policy.md."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from profiler.binary.cfi import UnwindRule
from profiler.binary.cfi.rules import REGISTER
from profiler.binary.objfile import ObjectFile
from profiler.binary.prologue import FRAME_SET
from profiler.model import (
    DW_RA,
    DW_RBP,
    DW_RSP,
    NUM_DWARF_REGS,
    NativeFrame,
    StopReason,
    UnwindMethod,
    UnwoundStack,
)
from profiler.unwind.address_space import AddressSpace, ModuleEntry
from profiler.unwind.cfi import Registers, step_cfi
from profiler.unwind.framepointer import StepResult, step_chain, step_first
from profiler.unwind.registers_read import RegistersGrew, RegistersRead
from profiler.unwind.reuse import MAX_LOGS, LoggedWindow, Previous, WalkLog, WalkState, loggable
from profiler.unwind.scan import SCAN_WORDS, SCAN_WORDS_INNERMOST, find_return_address
from profiler.unwind.stack import StackWindow
from profiler.unwind.trampolines import rule_before

#: a return address below this is not one (the first page is never mapped): the walk went astray
MIN_PC = 0x1000
#: per-pc memo entries kept before the memo is cleared (a bound on memory)
MAX_MEMO = 1 << 18

_CFI, _SIGNAL = UnwindMethod.CFI, UnwindMethod.SIGNAL
#: why a walk fails when the words it needs are not in the copy
_LOST_STACK = (StopReason.WINDOW_EXHAUSTED, StopReason.BAD_FRAME, StopReason.NO_UNWIND_INFO)

#: methods whose pcs are code for certain (executed, or return addresses from unwind info or a decoded
#: prologue): one outside every mapping means the maps are out of date (``AddressSpace.find``)
_CODE_PCS = frozenset({UnwindMethod.IP, UnwindMethod.PROLOGUE, UnwindMethod.CFI, UnwindMethod.SIGNAL})
#: builds a NativeFrame without NamedTuple's Python-level ``__new__``: 0.23 us instead of 0.45 us a frame
_new_frame = tuple.__new__

#: what the per-pc memo holds for a looked-up avma: (module id, bias, CFI rule, module entry)
_Resolved = tuple[int, int, "UnwindRule | None", ModuleEntry]


def _ra_in_register(rule: UnwindRule) -> bool:
    """The row keeps the return address in a register (DW_CFA_register), not on the stack: glibc's
    ``__libc_vfork`` pops it into rdi around the system call (sysdeps/unix/sysv/linux/x86_64/vfork.S),
    where the parent waits for as long as its child runs before exec, with its CFA equal to rsp. Such an
    innermost frame moves no stack pointer and is still a frame; one that reads its return address from
    memory at the stack pointer is a corrupt rule (it would return to itself forever)."""
    return any(reg == DW_RA and kind == REGISTER for reg, kind, _arg in rule.registers)


class NativeUnwinder:
    """Unwinds snapshots of one process (the sampler calls ``unwind`` once per captured thread).

    A per-pc memo maps each looked-up avma to its module and CFI rule, so a warm frame costs one dict
    hit instead of a module search and a table lookup. It is emptied whenever the address space's
    executable ranges change (``AddressSpace.generation``: ``dlopen``, ``dlclose``, a library replaced at
    the same address).

    A frame's saved callee-saved registers are read only if some rule met so far uses them (``registers_read.py``):
    the rules a walk memoizes keep only those in their ``saved``. A rule, or a prologue's frame, that uses a
    register not kept yet adds it and has the walk start over (once per register and process), with the
    memo emptied, so a walk's frames never depend on what was left out.
    """

    def __init__(self, space: AddressSpace, max_frames: int = 2048) -> None:
        self.space = space
        self.max_frames = max_frames
        self._memo: dict[int, _Resolved] = {}
        #: return address -> the rule of the function it enters at its first instruction (``_entered_at_start``)
        #: or None, for return addresses whose byte before has no CFI: kept apart from ``_memo``, which is
        #: keyed by the address looked up, since an innermost pc may equal another frame's return address - 1
        self._entered: dict[int, UnwindRule | None] = {}
        self._memo_generation = -1
        self.frames_scanned = 0  #: frames found by a stack scan (a best effort: the session counts them)
        #: thread -> its last walk, least recently walked first (at most ``reuse.MAX_LOGS``)
        self._logs: dict[Hashable, WalkLog] = {}
        self._kept = RegistersRead()  #: which registers are read where frames saved them

    def unwind(self, regs: Sequence[int | None], window: StackWindow, thread: Hashable | None = None) -> UnwoundStack:
        """Frames innermost first from ``regs`` (DWARF order: rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp,
        r8-r15, rip) and the stack copy. ``thread``: a key of the thread sampled; its walk takes over the
        outer frames of the thread's previous walk where they still hold (``reuse.py``), and is kept for its
        next."""
        regs = list(regs[:NUM_DWARF_REGS]) + [None] * (NUM_DWARF_REGS - len(regs))
        while True:
            try:
                return self._unwind(regs, window, thread)
            except RegistersGrew:  # walk again, reading the register a rule was found to use: nothing kept before
                self._memo.clear()  # holds rules cut to the registers kept until now
                self._entered.clear()
                self._logs.clear()

    def _unwind(self, regs: list[int | None], window: StackWindow, thread: Hashable | None) -> UnwoundStack:
        memo = self._memo
        generation = self.space.generation
        if generation != self._memo_generation or len(memo) + len(self._entered) >= MAX_MEMO:
            memo.clear()
            self._entered.clear()
            self._memo_generation = generation
        logs = self._logs
        prev = logs.pop(thread, None) if thread is not None else None
        if thread is None or not loggable(window):
            return self._walk(regs, window, [], None, None)
        if prev is not None and prev.paused:  # its take-overs stopped paying (``reuse.MISSES_BEFORE_PAUSE``)
            prev.paused -= 1
            logs[thread] = prev  # kept, the most recently walked: a later walk may still take it over
            return self._walk(regs, window, [], None, None)
        log = WalkLog(generation, window.end)
        previous = Previous(prev) if prev is not None and prev.generation == generation else None
        scanned = self.frames_scanned
        stack = self._walk(regs, LoggedWindow(window, log), log.frames, log, previous)
        log.scanned = self.frames_scanned != scanned
        log.judge(previous, len(stack.frames))
        # the most recently walked last; one begun before the code mapped changed is never taken over
        logs[thread] = log
        if len(logs) > MAX_LOGS:
            del logs[next(iter(logs))]
        return stack

    def _walk(
        self,
        regs: list[int | None],
        window: StackWindow,
        frames: list[NativeFrame],
        log: WalkLog | None,
        previous: Previous | None,
    ) -> UnwoundStack:
        """The walk itself, appending to ``frames``; with ``log``, each iteration's state is noted there, and
        the ``previous`` walk's frames are taken over at the first state they share whose reads still hold."""
        append = frames.append
        memo = self._memo
        max_frames = self.max_frames
        pc = regs[DW_RA] or 0
        sp = regs[DW_RSP] or 0
        method = UnwindMethod.IP
        exact = True  # look the pc up as is: innermost frame, or interrupted by a signal
        # each iteration's stack pointer, the stack pointer of the frame it appends: a logged walk's are its
        # log's (``WalkLog.note``, and those of the frames it takes over), an unlogged walk notes its own
        sps: list[int] = log.sps if log is not None else []
        note_sp = sps.append if log is None else None
        while True:
            if note_sp is not None:
                note_sp(sp)
            if log is not None:
                state = (regs, method, exact)
                j = previous.find(sp) if previous is not None else None
                if previous is not None and j is not None and self._take_over(log, previous, j, state, len(frames),
                                                                              window):  # fmt: skip
                    regs, method, exact = previous.log.states[-1]
                    pc, sp = regs[DW_RA] or 0, regs[DW_RSP] or 0
                    previous = None
                else:
                    log.note(state, sp)
            lookup = pc if exact else pc - 1
            hit = memo.get(lookup)
            if hit is None:
                hit = self._resolve(lookup, method in _CODE_PCS)
            rule: UnwindRule | None = None
            entry: ModuleEntry | None = None
            if hit is None:
                if frames:
                    return UnwoundStack(frames, StopReason.PC_OUTSIDE_MODULE, 0, sps)
                append(_new_frame(NativeFrame, (-1, pc, pc, method)))  # JIT or anonymous code: frame pointers
            else:
                if len(frames) >= max_frames:
                    return UnwoundStack(frames, StopReason.DEPTH_LIMIT, 0, sps)
                module_id, bias, rule, entry = hit
                if rule is None and not exact and entry.obj is not None:
                    entered = self._entered
                    if pc not in entered:
                        entered[pc] = self._kept.admit(_entered_at_start(entry.obj, pc - bias))
                    rule = entered[pc]
                    if rule is not None:
                        lookup = pc
                svma = lookup - bias
                if rule is not None and rule.signal and not exact:  # a signal trampoline, named at its entry
                    svma += 1
                append(_new_frame(NativeFrame, (module_id, svma, pc, method)))
            if rule is not None:
                caller = step_cfi(rule, regs, window)
                method, exact = (_SIGNAL, True) if rule.signal else (_CFI, False)
            else:
                caller, method = self._step_frame_pointer(entry, lookup, len(frames) == 1, regs, window)
                exact = False
            if caller.__class__ is StopReason:
                if caller in _LOST_STACK and not window.contains(sp) and _past_signal(frames):
                    # on another stack than the one copied: --stack-bytes would not help
                    return UnwoundStack(frames, StopReason.OTHER_STACK, sp, sps)
                return UnwoundStack(frames, caller, 0, sps)
            # a register list: not a StopReason (checked by class, which mypy does not narrow on)
            regs = caller  # type: ignore[assignment]
            pc, new_sp = regs[DW_RA] or 0, regs[DW_RSP]
            if not pc or pc < MIN_PC:
                return UnwoundStack(frames, StopReason.END_OF_STACK if not pc else StopReason.BAD_FRAME, 0, sps)
            if new_sp is None:
                return UnwoundStack(frames, StopReason.NO_PROGRESS, 0, sps)
            if new_sp <= sp and method is not _SIGNAL:
                if not (new_sp == sp and len(frames) == 1 and rule is not None and _ra_in_register(rule)):
                    return UnwoundStack(frames, StopReason.NO_PROGRESS, 0, sps)
            sp = new_sp

    def _take_over(
        self, log: WalkLog, previous: Previous, j: int, state: WalkState, depth: int, window: StackWindow
    ) -> bool:
        """Whether this walk, at ``state`` after ``depth`` frames, can take over the previous walk's
        iterations from ``j`` (at the same stack pointer) to its last, which it then runs again: ``j``
        started at the same state, the code mapped did not change since, the frames fit under the depth
        limit, and every word those iterations read is unchanged. If so, they are noted in ``log``, and
        their frames appended to the walk's (``log.frames``)."""
        prev = previous.log
        if not self._kept.same_state(prev.states[j], state):
            return False
        previous.attempts += 1
        last = len(prev.states) - 1
        if not (
            self.space.generation == prev.generation
            and depth + last - j <= self.max_frames
            and prev.reads_match(window, j, last)
        ):
            return False
        log.take(prev, j)
        previous.taken = last - j
        if prev.scanned:
            self.frames_scanned += sum(1 for f in prev.frames[j:last] if f.method is UnwindMethod.SCAN)
        return True

    def _resolve(self, avma: int, code: bool) -> _Resolved | None:
        """Module and CFI rule of ``avma``, memoized; None (not memoized) outside every module. ``code``:
        the pc is known to be code (not from an rbp chain), so a miss reads the maps again at once."""
        entry = self.space.find(avma, code)
        if entry is None:
            return None
        bias = entry.module.bias
        if entry.obj is not None:
            rule = entry.obj.unwind_rule(avma - bias)
        else:  # file-less: no table, but a trampoline's fixed frame (read from the target once per address)
            rule = rule_before(self.space.process.read, avma)
        resolved = (entry.module.id, bias, self._kept.admit(rule), entry)
        self._memo[avma] = resolved
        return resolved

    def _step_frame_pointer(
        self, entry: ModuleEntry | None, lookup: int, innermost: bool, regs: Registers, window: StackWindow
    ) -> tuple[Registers | StopReason, UnwindMethod]:
        """The step for a frame without a CFI row. Where the function's frame at ``lookup`` is known from its
        code (``prologue.py``) and is not an rbp frame, the return address is found from it: in the innermost
        frame before its prologue set rbp up, and in a caller frame built without frame pointers or CFI
        (rustc's ``main`` shim under panic=abort, ``push %rax; call; pop; ret``, stopped every walk of a Rust
        program's main thread). Else the rbp chain. Where that fails its checks, or gives a return address
        in no module, a stack scan (``_scan``); where the scan finds nothing either, "no unwind info"."""
        sp, bp = regs[DW_RSP] or 0, regs[DW_RBP] or 0
        method = UnwindMethod.FRAME_POINTER
        step: StepResult
        state = entry.obj.frame_state(lookup - entry.module.bias) if entry and entry.obj else None
        if state is not None and state.base is not None and not innermost and state.base not in self._kept.registers:
            self._kept.keep(frozenset((state.base,)))  # a caller frame addressed from a saved register's copy
        if innermost or (state is not None and state.ra_offset != FRAME_SET):
            base = sp if state is None or state.base is None else regs[state.base]
            step = step_first(state, base, bp, window) if base is not None else StopReason.BAD_FRAME
            if state is not None and state.ra_offset != FRAME_SET:
                method = UnwindMethod.PROLOGUE
        else:
            step = step_chain(bp, sp, window)
        if isinstance(step, StopReason):
            if step is StopReason.END_OF_STACK and (entry is None or entry.obj is None):
                # a zero rbp or return address in code without a file (a JIT's) is a value, not the outermost
                # frame's mark, which only code in a file sets (_start, a thread's start): HotSpot without
                # -XX:+PreserveFramePointer keeps anything in rbp, and each sample of a busy Java thread
                # was one frame long, "complete"
                step = StopReason.BAD_FRAME
            if step is not StopReason.BAD_FRAME:
                return step, method
            scanned = self._scan(entry, lookup, innermost, sp, bp, window)
            return (StopReason.NO_UNWIND_INFO, method) if scanned is None else (scanned, UnwindMethod.SCAN)
        ra, caller_sp, caller_bp = step
        if self._lookup(ra - 1) is None:  # the rbp chain (or a misread function) led out of the code
            scanned = self._scan(entry, lookup, innermost, sp, bp, window)
            if scanned is not None:
                return scanned, UnwindMethod.SCAN
        # Without CFI nothing says where rbx and r12-r15 were saved: they become unknown.
        caller: Registers = [None] * NUM_DWARF_REGS
        caller[DW_RBP], caller[DW_RSP], caller[DW_RA] = caller_bp, caller_sp, ra
        return caller, method

    def _lookup(self, avma: int) -> _Resolved | None:
        hit = self._memo.get(avma)
        return hit if hit is not None else self._resolve(avma, False)

    def _scan(
        self, entry: ModuleEntry | None, lookup: int, innermost: bool, sp: int, bp: int, window: StackWindow
    ) -> Registers | None:
        """The caller of a frame nothing else could step, from a search of the stack above it
        (``scan.py``); None if no word there passes as its return address."""
        callee_start = None
        if entry is not None and entry.obj is not None and entry.obj.symbols is not None:
            hit = entry.obj.symbols.lookup(lookup - entry.bias)
            callee_start = hit[1] + entry.bias if hit is not None else None
        words = SCAN_WORDS_INNERMOST if innermost else SCAN_WORDS
        found = find_return_address(self.space, sp, window, words, callee_start, entry)
        if found is None:
            return None
        slot, ra = found
        self.frames_scanned += 1
        caller: Registers = [None] * NUM_DWARF_REGS
        caller[DW_RBP], caller[DW_RSP], caller[DW_RA] = bp, slot + 8, ra
        return caller


def _entered_at_start(obj: ObjectFile, svma: int) -> UnwindRule | None:
    """The CFI rule at ``svma`` when a return address there was made up to enter a function at its first
    instruction, not pushed by a call: no FDE covers the byte before it, and its function's FDE starts
    exactly there. glibc's makecontext has a coroutine's function return into ``__start_context`` so, whose
    CFI ends the walk (its return address undefined); looked up one byte back, as a call's return address
    is, it had no rule, and the frame-pointer chain left in rbp by getcontext led from the coroutine's
    stack into the stack of the thread that made it: callers it never had (``main``'s, without ``main``)."""
    return obj.unwind_rule(svma) if obj.function_start(svma) == svma else None


def _past_signal(frames: list[NativeFrame]) -> bool:
    """A signal frame was unwound (a frame was restored from one), so the frames beyond may be on another
    stack. Asked only of a walk that failed: the loop keeps no state for it."""
    return any(f.method is _SIGNAL for f in frames)
