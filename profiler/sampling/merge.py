"""Interleave runtime frames (Python) with native frames at the eval-loop activations. A pure function.

Both stacks are read innermost first. Runtime frames form *groups*, the frames one native eval-loop
activation runs, ending at the frame marked ``entry``; each group goes right inward of its activation's
native frame, so Python -> C -> Python reads in true call order. Activations are found by the address of
their records where the runtime keeps them (``placed``: ``anchoring.place``), else by the anchors' names,
with the tolerated count mismatches of ``_by_name``. A sample neither places keeps every frame, the runtime
frames above the native ones under an ``UNANCHORED`` marker, and its outcome is counted; none is dropped.
The rules, the cases they come from and what was measured: docs/decisions/python-anchoring.md.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import NamedTuple

from profiler.model import NativeFrame, RuntimeFrame, SyntheticFrame
from profiler.sampling.anchoring import BEYOND, UNKNOWN


class Marker(NamedTuple):
    """A frame nprof puts in a merged stack itself (``FrameKind.SYNTHETIC``)."""

    kind: SyntheticFrame


#: where native frames were not unwound, between a truncated native stack and the Python frames below it
CUT = Marker(SyntheticFrame.NATIVE_CUT)
#: between the native stack and Python frames that could not be placed in it
UNANCHORED = Marker(SyntheticFrame.UNANCHORED)

Frame = NativeFrame | RuntimeFrame | Marker


class MergeOutcome(enum.IntEnum):
    NO_RUNTIME = 0  #: no runtime frames: the native stack as is
    EXACT = 1  #: one group per anchor
    SURPLUS_ANCHOR = 2  #: one anchor without a group, tolerated
    TRUNCATED_NATIVE = 3  #: native walk ended early; outer groups placed below it
    UNANCHORED = 4  #: no activation found for the groups: runtime frames above the native stack, marked
    REST = 5  #: the outermost group stands for frames not read, of the outer anchors left: paired from inside
    OTHER_STACK = 6  #: the anchors outward of a coroutine's stack base run another coroutine: paired from inside
    PLACED = 7  #: every group paired with its activation by address (``anchoring.py``)
    #: by address, the outer groups' activations beyond a native walk that ended early: placed below it
    PLACED_TRUNCATED = 8


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
    placed: Sequence[int] = (),
) -> tuple[list[Frame], MergeOutcome]:
    """Interleave; ``anchors[i]`` says whether ``native[i]`` is an eval-loop anchor by name, ``placed[g]``
    the native frame holding group ``g``'s activation record (``anchoring.place``; empty: none known).
    Innermost first. ``is_base(i)``: whether ``native[i]`` is a coroutine's stack base (asked only of the
    frames between two anchors, when there are more anchors than groups)."""
    groups = group_runtime(runtime)
    if not groups:  # none, or only shims: a 3.12+ thread caught between an eval loop's entry and its frame
        return list(native), MergeOutcome.NO_RUNTIME
    if len(placed) == len(groups) and any(p != UNKNOWN for p in placed):
        by_address = _by_address(groups, placed, anchors, len(native))
        if by_address is not None:
            paired, below = by_address
            if not below:
                return _interleave(native, paired, []), MergeOutcome.PLACED
            if not native_complete:
                rest: list[Frame] = [CUT, *(frame for group in below for frame in group)]
                return _interleave(native, paired, rest), MergeOutcome.PLACED_TRUNCATED
    return _by_name(native, anchors, groups, native_complete, is_base)


def _by_address(
    groups: list[list[RuntimeFrame]], placed: Sequence[int], anchors: Sequence[bool], n_native: int
) -> tuple[dict[int, list[RuntimeFrame]], list[list[RuntimeFrame]]] | None:
    """Groups paired with native frames by their activations' records; a run of groups without one takes
    the anchors by name between its placed neighbours, as many as it has groups (one more where the run is
    the innermost: an activation not entered yet), or, outermost, the frames not unwound (``BEYOND``).
    Returns (native index -> group, the outer groups beyond the walk), or None where the records cannot
    be trusted: out of order, in no frame (``NOWHERE``), or a run the names do not fill."""
    paired: dict[int, list[RuntimeFrame]] = {}
    n = len(groups)
    lowest = -1  # the native frame of the group placed last, inward of the next
    g = 0
    while g < n:
        at = placed[g]
        if at >= 0:
            if at <= lowest:
                return None  # two groups in one frame, or in the wrong order
            paired[at] = groups[g]
            lowest = at
            g += 1
            continue
        if at == BEYOND:
            if any(p >= 0 for p in placed[g:]):
                return None  # a group inward of one beyond the walk
            return paired, groups[g:]
        if at != UNKNOWN:
            return None
        h = g  # the run of groups g..h-1 without a record
        while h < n and placed[h] == UNKNOWN:
            h += 1
        bound = placed[h] if h < n and placed[h] >= 0 else n_native
        found = [i for i in range(lowest + 1, bound) if anchors[i]]
        want = h - g
        if len(found) == want + 1 and g == 0:
            found = found[1:]  # the innermost activation has no frame yet
        if len(found) > want and h == n and groups[-1][-1].rest:
            found = found[:want]  # the outermost group stands for the frames of the outer activations
        if len(found) != want:
            if h < n and placed[h] != BEYOND or len(found) > want:
                return None
            # outermost run, fewer anchors than groups: the rest lie beyond the walk (the caller checks
            # that it ended early)
            for i, group in zip(found, groups[g:h]):
                paired[i] = group
            return paired, groups[g + len(found):]
        for i, group in zip(found, groups[g:h]):
            paired[i] = group
        lowest = found[-1] if found else lowest
        g = h
    return paired, []


def _by_name(
    native: Sequence[NativeFrame],
    anchors: Sequence[bool],
    groups: list[list[RuntimeFrame]],
    native_complete: bool,
    is_base: Callable[[int], bool] | None,
) -> tuple[list[Frame], MergeOutcome]:
    """The merge by the anchors' names alone (the module docstring)."""
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
    return [*flat, UNANCHORED, *native], MergeOutcome.UNANCHORED


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
