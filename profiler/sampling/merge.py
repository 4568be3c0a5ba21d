"""Interleave runtime frames (Python) with native frames at the eval-loop anchors. A pure function.

Both stacks are read innermost first. Runtime frames form *groups*: the frames one native eval-loop
activation runs, ending at (and including) the frame marked ``entry``. Native frames the agent calls
*anchors* (``_PyEval_EvalFrameDefault``) are the activations. Pairing the i-th group with the i-th anchor
puts every Python frame right inward of the C frame that executes it, so Python -> C -> Python reads in
true call order.

When the counts disagree (``../shared/reference/cpython-internals.md`` sections 2.6 and 4.3):

* one anchor more than groups: an activation that has not pushed its first frame yet (or has just popped
  its last). The surplus is the innermost anchor; pair the rest from the outside.
* fewer anchors than groups, and the native walk ended early (window exhausted, no unwind info...): pair
  from the inside, and put the outer groups below the truncated native stack, where they belong, with a
  ``CUT`` marker between, for the native frames not unwound there.
* more anchors than groups, and a coroutine's stack base (greenlet's ``g_initialstub``: ``is_base``) lies
  between the anchor of the outermost group and the next: the groups are the running coroutine's, run by
  the anchors inward of its base, and the anchors outward of it run another coroutine's frames, which the
  thread's chain does not hold. Pair from the inside. (Paired from the outside, a greenlet's frames sat on
  the main greenlet's eval loop, with greenlet's switch above them, in every sample.)
* more anchors than groups, the outermost group standing for frames not read (``RuntimeFrame.rest``: a
  subinterpreter's code run from an older interpreter's, whose frames run in the outer activations): pair
  from the inside; the outer anchors left keep no group.
* anything else: keep every frame, Python frames on top of the native ones (DESIGN.md section 4), and
  report the mismatch so it is counted. A sample is never dropped.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from typing import NamedTuple

from profiler.model import NativeFrame, RuntimeFrame, SyntheticFrame


class Marker(NamedTuple):
    """A frame nprof puts in a merged stack itself (``FrameKind.SYNTHETIC``)."""

    kind: SyntheticFrame


#: where native frames were not unwound, between a truncated native stack and the Python frames below it
CUT = Marker(SyntheticFrame.NATIVE_CUT)

Frame = NativeFrame | RuntimeFrame | Marker


class MergeOutcome(enum.IntEnum):
    NO_RUNTIME = 0  #: no runtime frames: the native stack as is
    EXACT = 1  #: one group per anchor
    SURPLUS_ANCHOR = 2  #: one anchor without a group, tolerated
    TRUNCATED_NATIVE = 3  #: native walk ended early; outer groups placed below it
    MISMATCH = 4  #: counts disagree; runtime frames put on top of the native stack
    REST = 5  #: the outermost group stands for frames not read, of the outer anchors left: paired from inside
    OTHER_STACK = 6  #: the anchors outward of a coroutine's stack base run another coroutine: paired from inside


def group_runtime(runtime: Sequence[RuntimeFrame]) -> list[list[RuntimeFrame]]:
    """Split innermost-first runtime frames into activation groups; shim frames are dropped."""
    groups: list[list[RuntimeFrame]] = []
    current: list[RuntimeFrame] = []
    for frame in runtime:
        if frame.shim:
            continue
        current.append(frame)
        if frame.entry:
            groups.append(current)
            current = []
    if current:  # frames below the last entry marker: the outermost activation's
        groups.append(current)
    return groups


def merge(
    native: Sequence[NativeFrame],
    anchors: Sequence[bool],
    runtime: Sequence[RuntimeFrame],
    native_complete: bool,
    is_base: Callable[[int], bool] | None = None,
) -> tuple[list[Frame], MergeOutcome]:
    """Interleave; ``anchors[i]`` says whether ``native[i]`` is an eval-loop anchor. Innermost first.
    ``is_base(i)``: whether ``native[i]`` is a coroutine's stack base (asked only of the frames between two
    anchors, when there are more anchors than groups)."""
    groups = group_runtime(runtime)
    if not groups:  # none, or only shims: a 3.12+ thread caught between an eval loop's entry and its frame
        return list(native), MergeOutcome.NO_RUNTIME
    anchor_at = [i for i, is_anchor in enumerate(anchors) if is_anchor]
    n_anchor, n_group = len(anchor_at), len(groups)
    if n_anchor == n_group:
        return _interleave(native, dict(zip(anchor_at, groups)), []), MergeOutcome.EXACT
    if n_anchor > n_group and groups[-1][-1].rest:
        return _interleave(native, dict(zip(anchor_at, groups)), []), MergeOutcome.REST
    if n_anchor > n_group and is_base is not None:
        if any(is_base(i) for i in range(anchor_at[n_group - 1] + 1, anchor_at[n_group])):
            return _interleave(native, dict(zip(anchor_at, groups)), []), MergeOutcome.OTHER_STACK
    if n_anchor == n_group + 1:
        return _interleave(native, dict(zip(anchor_at[1:], groups)), []), MergeOutcome.SURPLUS_ANCHOR
    if n_anchor < n_group and not native_complete:
        paired = dict(zip(anchor_at, groups))
        rest: list[Frame] = [CUT, *(frame for group in groups[n_anchor:] for frame in group)]
        return _interleave(native, paired, rest), MergeOutcome.TRUNCATED_NATIVE
    flat: list[Frame] = [frame for group in groups for frame in group]
    return flat + list(native), MergeOutcome.MISMATCH


def _interleave(
    native: Sequence[NativeFrame], groups_at: dict[int, list[RuntimeFrame]], below: list[Frame]
) -> list[Frame]:
    out: list[Frame] = []
    for i, frame in enumerate(native):
        group = groups_at.get(i)
        if group is not None:
            out.extend(group)  # the group's frames run inward of (are called by) the anchor
        out.append(frame)
    out.extend(below)
    return out
