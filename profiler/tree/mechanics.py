"""Which runtime mechanism (GIL hand-off, waiting for the GIL, garbage collection, import) each distinct stack's
leaf ran for, and its innermost runtime frame (a Python function's own time, whatever native code runs below
it): the summary table's named lines and its Python self column (``totals.py``).

A sample belongs to a mechanism when, going from its leaf towards the root through the frames shown, a
frame of that mechanism (``FrameInfo.mechanism``, which the runtime's agent marks) comes before any runtime
frame that is not one: ``__lll_lock_wake`` called by ``pthread_mutex_unlock`` called by ``drop_gil`` is the
GIL hand-off; a Python ``__del__`` run by the collector is that function's time, not the collector's; the
body of an imported module is the module's, its loading (importlib's own frames, unmarshalling, an
extension's init) the import's. The innermost mechanism decides, so each sample is in one line at most.
A thread in the wait for the GIL that is releasing a lock (``take_gil`` unlocking the GIL's mutex, waking a
waiter) is handing over, not waiting (``LOCK_RELEASE``).

The order is the one ``StackDisplays`` shows: each frame's function, then the calls inlined at it; an
interpreter frame's inlined calls after the runtime frames it runs (CPython's ``eval_frame_handle_pending``
inlined into the eval loop, calling ``drop_gil``). Worked out over the prefix tree for all stacks at once, a
level at a time from the leaves, as ``totals.py`` does, until each stack is decided and its innermost runtime
frame found (most within a few frames of the leaf); ``tests/unit/test_top_table.py`` checks it against each
stack shown, one at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profiler.model import FrameInfo, FrameKind, Mechanism
from profiler.tree.display import StackDisplays

#: the order of ``Mechanism``'s members: code ``i + 1`` is ``MECHANISMS[i]``; 0 is none
MECHANISMS = list(Mechanism)
_CODE = {m: i + 1 for i, m in enumerate(MECHANISMS)}
_STOP = -1  #: a runtime frame of no mechanism: the sample is that function's own
_WAIT, _HANDOFF = _CODE[Mechanism.GIL_WAIT], _CODE[Mechanism.GIL_HANDOFF]

#: glibc's functions that release a lock or wake its waiters (their names in libc.so.6's symbol table, glibc
#: 2.36: ``__GI___lll_lock_wake``, ``___pthread_mutex_unlock``, ``__pthread_mutex_unlock_usercnt``,
#: ``___pthread_cond_signal``, ``__pthread_cond_broadcast_2_0``, ...): under ``take_gil`` they hand the GIL's
#: mutex over. Not "wake" alone: ``__condvar_confirm_wakeup`` is a waiter's
LOCK_RELEASE = re.compile(r"lll_lock_wake|mutex_unlock|cond_signal|cond_broadcast")


def label(mechanism: Mechanism) -> str:
    """The table's line for a mechanism: ``[GIL hand-off]``, bracketed as nprof's other made-up frames are."""
    return f"[{mechanism.value}]"


def is_lock_release(frame: FrameInfo) -> bool:
    return frame.module is not None and LOCK_RELEASE.search(frame.name) is not None


@dataclass(frozen=True)
class StackMechanics:
    """Per stack of the ``sids`` given to ``stack_mechanics``: the mechanism its leaf ran for (None: none),
    and the display id of its innermost runtime frame shown (-1: none)."""

    mechanism: list[Mechanism | None]
    runtime_leaf: npt.NDArray[np.int64]


class _FrameScan:
    """Per frame id, what its shown frames say when a walk from the leaf meets them: the code of the first
    decisive one (a mechanism's, or ``_STOP`` for a runtime frame of none; 0: none) and whether a lock
    release came before it (or anywhere, if none decides), over all its shown frames (``whole``) and over
    its inlined calls alone (``calls``: an interpreter frame's, shown after the runtime frames it runs)."""

    def __init__(self, displays: StackDisplays) -> None:
        session = displays.session
        count = len(session.frames)
        runtime = session.frames.kinds() == FrameKind.RUNTIME
        infos = displays.infos
        codes = [_CODE[f.mechanism] if f.mechanism is not None else 0 for f in infos]
        release = [is_lock_release(f) for f in infos]
        self.whole = np.zeros(count, dtype=np.int8)
        self.whole_release = np.zeros(count, dtype=bool)
        self.calls = np.zeros(count, dtype=np.int8)
        self.calls_release = np.zeros(count, dtype=bool)
        self.deferring = np.zeros(count, dtype=bool)  #: interpreter frames with inlined calls shown
        self.runtime = runtime
        self.runtime_shown = np.full(count, -1, dtype=np.int64)  #: a runtime frame's display id, if shown
        for fid in range(count):
            shown = displays.of_frame(fid)
            if runtime[fid]:
                if shown:
                    self.runtime_shown[fid] = shown[0]
                    self.whole[fid] = codes[shown[0]] or _STOP
                continue
            self.whole[fid], self.whole_release[fid] = _scan(shown, codes, release)
            calls = displays.calls_of(fid)
            if calls and displays.interpreter[fid]:  # (followed by runtime frames, they come after them)
                self.deferring[fid] = True
                self.calls[fid], self.calls_release[fid] = _scan(calls, codes, release)


def _scan(shown: tuple[int, ...], codes: list[int], release: list[bool]) -> tuple[int, bool]:
    """The first mechanism among display ids ``shown``, innermost first, and whether a release came before."""
    released = False
    for d in reversed(shown):
        if codes[d]:
            return codes[d], released
        released = released or release[d]
    return 0, released


def stack_mechanics(
    displays: StackDisplays, sids: npt.NDArray[np.int64], parent: npt.NDArray[np.int64], frame: npt.NDArray[np.int64]
) -> StackMechanics:
    """The mechanism and innermost runtime frame of each stack of ``sids``, for all at once (see the module's
    docstring). A walk that meets a runtime frame waits for the frame above the run of runtime frames it
    starts: an interpreter frame there shows its inlined calls after the run, so they come first."""
    scan = _FrameScan(displays)
    n = len(sids)
    code = np.zeros(n, dtype=np.int8)  # 0 while undecided
    released = np.zeros(n, dtype=bool)
    in_run = np.zeros(n, dtype=bool)  # the walk is in a run of runtime frames
    run_leaf = np.full(n, -1, dtype=np.int64)  # ... whose innermost shown frame is this frame id
    runtime_leaf = np.full(n, -1, dtype=np.int64)

    def decide(rows: npt.NDArray[np.int64], found: npt.NDArray[np.int8], release: npt.NDArray[np.bool_]) -> None:
        """Rows ``rows`` (undecided) meet code ``found`` (0: nothing yet), with a release before it or not."""
        hit = found != 0
        rows, found, release = rows[hit], found[hit], release[hit] | released[rows[hit]]
        code[rows] = np.where((found == _WAIT) & release, np.int8(_HANDOFF), found)

    index, node = np.arange(n, dtype=np.int64), sids.astype(np.int64)
    while len(node):  # (``tree_levels``, leaving out the stacks already decided whose runtime leaf is known)
        fids = frame[node].astype(np.int64)
        runtime = scan.runtime[fids]
        shown = scan.runtime_shown[fids]
        first = runtime & (shown >= 0) & (runtime_leaf[index] < 0)
        runtime_leaf[index[first]] = shown[first]
        open_ = code[index] == 0
        # a native frame above a run of runtime frames: its deferred calls, then the run's innermost frame
        above = open_ & ~runtime & in_run[index]
        rows, at = index[above], fids[above]
        if len(rows):
            deferring = scan.deferring[at]
            decide(rows, np.where(deferring, scan.calls[at], 0).astype(np.int8), scan.calls_release[at])
            released[rows] |= deferring & scan.calls_release[at]
            still = code[rows] == 0
            leaf = run_leaf[rows]
            by_run = still & (leaf >= 0)
            decide(rows[by_run], scan.whole[leaf[by_run]], np.zeros(int(by_run.sum()), dtype=bool))
        in_run[index[~runtime]] = False
        # a native frame met outside a run (or above a run of no shown frame): all its shown frames
        native = (code[index] == 0) & ~runtime
        rows, at = index[native], fids[native]
        if len(rows):
            decide(rows, scan.whole[at], scan.whole_release[at])
            released[rows] |= scan.whole_release[at]
        # a runtime frame: starts a run, or continues one
        starts = open_ & runtime & ~in_run[index]
        in_run[index[starts]] = True
        run_leaf[index[starts]] = -1
        joins = open_ & runtime & (shown >= 0)
        rows = index[joins]
        unset = run_leaf[rows] < 0
        run_leaf[rows[unset]] = fids[joins][unset]
        node = parent[node]
        up = (node >= 0) & ((code[index] == 0) | (runtime_leaf[index] < 0))
        index, node = index[up], node[up]
    # walks that ended in a run of runtime frames (a root of Python frames, as with --no-native)
    rows = np.nonzero((code == 0) & in_run & (run_leaf >= 0))[0]
    decide(rows, scan.whole[run_leaf[rows]], np.zeros(len(rows), dtype=bool))
    mechanisms = [MECHANISMS[c - 1] if c > 0 else None for c in code.tolist()]
    return StackMechanics(mechanisms, runtime_leaf)
