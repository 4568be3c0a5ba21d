"""speedscope's file format (https://www.speedscope.app/file-format-schema.json), written with orjson.

One *sampled* profile per thread, all sharing one frame table, after a first profile of all threads together
where there are several, which speedscope opens first (``activeProfileIndex``;
docs/decisions/speedscope-all-threads.md). A frame
of the table is a function, its file (whole) and the line it is declared at; with ``--lines``, a function
and the line sampled, one frame per line (``tree/frame_identity.py``). Samples are aggregated: each
distinct stack appears once per profile with its sample count as weight, so the file's size is bounded by
the number of distinct stacks (py-spy writes one entry per sample); the profile of all threads adds each
distinct stack once more. Weights are in seconds: each sample stands for the time between two ticks of the
recording.

A session keeps counts, not the order samples came in, so there is no timeline to give speedscope's "Time
Order" view, which draws the samples in file order and merges neighbours' common frames. The stacks are
written in alphabetical order of their frames, root first, as flamegraph.pl sorts them: that view then
draws a flame graph, each call path once. (Written heaviest first, it drew a made-up timeline in which
a function called on several paths appeared as scattered blocks.)
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import orjson

from profiler import __version__
from profiler.config import ExportConfig
from profiler.export.base import Exporter
from profiler.model import FrameInfo
from profiler.profile.session import Session
from profiler.tree.calltree import frame_filter, process_labels, stack_counts, thread_label
from profiler.tree.display import StackDisplays

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"


def profile_name(session: Session) -> str:
    command = " ".join(session.meta.command) or "?"
    if len(command) > 120:
        command = command[:117] + "..."
    return f"nprof: {command} (pid {session.meta.pid})"


def _frame(info: FrameInfo) -> dict[str, object]:
    out: dict[str, object] = {"name": info.name}
    if info.file:
        out["file"] = info.file
        if info.line:
            out["line"] = info.line
    elif info.module:
        out["file"] = info.module
    return out


class _SharedFrames:
    """speedscope's frame table, which identifies frames by index: frames that look the same (a function
    sampled at several addresses) must share one index, or the flame graph shows the function as several
    nodes. Holds the frames some shown stack uses, in the order they were first used."""

    def __init__(self, displays: StackDisplays) -> None:
        self.frames: list[dict[str, object]] = []
        self._infos = displays.infos
        self._of_display = [-1] * len(displays.infos)  #: display id -> index, once used
        self._by_key: dict[tuple[str, str, int], int] = {}
        self._roots: dict[str, int] = {}

    def root(self, label: str) -> int:
        """The index of a frame standing for a process (its label): the root of that process's stacks in the
        profile of all threads of a session of several processes, which keeps them apart, as folded does."""
        i = self._roots.get(label)
        if i is None:
            i = self._roots[label] = len(self.frames)
            self.frames.append({"name": label})
        return i

    def indices(self, shown: list[int]) -> list[int]:
        """The indices of the frames of a stack's display ids."""
        out = [self._of_display[d] for d in shown]
        if -1 in out:
            for j, d in enumerate(shown):
                if out[j] < 0:
                    out[j] = self._of_display[d] = self._add(self._infos[d])
        return out

    def _add(self, f: FrameInfo) -> int:
        key = _frame_key(f)
        i = self._by_key.get(key)
        if i is None:
            i = self._by_key[key] = len(self.frames)
            self.frames.append(_frame(f))
        return i


def _frame_key(f: FrameInfo) -> tuple[str, str, int]:
    """What makes frames one entry of the frame table, and orders stacks: its name, file (or module), line."""
    return (f.name, f.file or f.module or "", f.line or 0)


def _sort_ranks(displays: StackDisplays) -> list[int]:
    """Per display id, the rank of its frame's key among all of them: stacks compared as lists of ranks are in
    the alphabetical order of their frames, without building strings per stack. Two frames of one key share
    a rank as they share an index in the frame table, so stacks of equal ranks show the same frames."""
    keys = [_frame_key(f) for f in displays.infos]
    position = {key: i for i, key in enumerate(sorted(set(keys)))}
    return [position[key] for key in keys]


class _ShownStacks:
    """The stacks that some profile shows, in flame graph order, each as speedscope's frame indices, once:
    ``group`` gives each stack id the position of what it shows, which stacks that show the same frames (an
    address elsewhere in a function, a hidden frame) share. Profiles then sort and merge their stacks by
    that int; sorted by frames in each profile, the profile of all threads doubled the time to sort."""

    def __init__(self, displays: StackDisplays, shared: _SharedFrames, sids: list[int]) -> None:
        rank = _sort_ranks(displays)
        keyed = [([rank[d] for d in shown], shared.indices(shown), sid)
                 for sid, shown in zip(sids, displays.many(sids)) if shown]  # fmt: skip
        keyed.sort(key=itemgetter(0))  # (by the ranks alone: a tuple's comparison compares them twice)
        #: per position, the frame indices shown, root first
        self.frames: list[list[int]] = []
        #: stack id -> position; none for a stack that shows nothing (every frame hidden)
        self.group: dict[int, int] = {}
        last: list[int] | None = None
        for ranks, indices, sid in keyed:
            if ranks != last:
                self.frames.append(indices)
                last = ranks
            self.group[sid] = len(self.frames) - 1


class SpeedscopeExporter(Exporter):
    format = "speedscope"
    extensions = (".speedscope.json", ".json")

    def render(self, session: Session, config: ExportConfig) -> bytes:
        displays = StackDisplays(session, frame_filter(config), config.lines, config.hide_interpreter)
        shared = _SharedFrames(displays)
        counts = stack_counts(session, config)
        shown = _ShownStacks(displays, shared, list({sid for per in counts.values() for sid in per}))
        seconds_per_sample = _seconds_per_sample(session)
        profiles: list[dict[str, Any]] = []
        processes = process_labels(session)
        #: process label ("" in a session of one process) -> position of a stack shown -> samples of all threads
        together: dict[str, dict[int, int]] = {}
        group = shown.group
        for thread, per in counts.items():
            samples: dict[int, int] = {}  #: position of a stack shown -> the thread's samples
            for sid, n in per.items():
                g = group.get(sid)
                if g is not None:
                    samples[g] = samples.get(g, 0) + n
            if not samples:
                continue
            t = session.threads[thread]
            process = processes.get(t.pid, "")
            of_process = together.setdefault(process, {})
            for g, n in samples.items():
                of_process[g] = of_process.get(g, 0) + n
            name = f"{process}: {thread_label(t)}" if process else thread_label(t)
            rows = sorted(samples.items())
            profiles.append(_sampled(name, [shown.frames[g] for g, _n in rows], [n for _g, n in rows],
                                     seconds_per_sample))  # fmt: skip
        profiles.sort(key=lambda p: -p["endValue"])
        if len(profiles) > 1:
            stacks, weights = [], []
            for process in sorted(together):  # each process's stacks together, under its label
                root = [shared.root(process)] if process else []
                for g, n in sorted(together[process].items()):
                    stacks.append([*root, *shown.frames[g]] if root else shown.frames[g])
                    weights.append(n)
            name = _together_name(len(profiles), len(together))
            profiles.insert(0, _sampled(name, stacks, weights, seconds_per_sample))
        if not profiles:
            # an empty sampled profile keeps the file loadable when nothing was sampled (e.g. all idle)
            profiles.append(_sampled("no samples", [], [], seconds_per_sample))
        document = {
            "$schema": SCHEMA_URL,
            "name": profile_name(session),
            "exporter": f"nprof {__version__}",
            "activeProfileIndex": 0,
            "shared": {"frames": shared.frames},
            "profiles": profiles,
        }
        return orjson.dumps(document)


def _sampled(name: str, stacks: list[list[int]], counts: list[int], seconds_per_sample: float) -> dict[str, Any]:
    """A sampled profile of ``stacks`` (frame indices, root first, in the order the module's docstring gives),
    each weighed by its samples' time."""
    weights = [n * seconds_per_sample for n in counts]
    return {
        "type": "sampled",
        "name": name,
        "unit": "seconds",
        "startValue": 0,
        "endValue": sum(weights),
        "samples": stacks,
        "weights": weights,
    }


def _together_name(threads: int, processes: int) -> str:
    """The name of the profile of all threads: how many it merges, as speedscope lists each of them after it."""
    return f"all threads ({threads}) of {processes} processes" if processes > 1 else f"all threads ({threads})"


def _seconds_per_sample(session: Session) -> float:
    ticks = session.counters.get("ticks", 0)
    if ticks and session.meta.duration > 0:
        return session.meta.duration / ticks
    return 1.0 / session.meta.rate if session.meta.rate > 0 else 1.0
