"""speedscope's file format (https://www.speedscope.app/file-format-schema.json), written with orjson.

One *sampled* profile per thread, all sharing one frame table, after a first profile of all threads together
where there are several: speedscope opens the profile ``activeProfileIndex`` names, and a threaded server's
busiest thread alone held 2.9% of its samples (issue 44; docs/decisions/speedscope-all-threads.md).
Samples are aggregated: each distinct stack appears once per profile with its sample count as weight, so
the file's size is bounded by the number of distinct stacks (py-spy writes one entry per sample); the
profile of all threads adds each distinct stack once more. Weights are in seconds: each sample stands for
the time between two ticks of the recording.

A session keeps counts, not the order samples came in, so there is no timeline to give speedscope's "Time
Order" view, which draws the samples in file order and merges neighbours' common frames. The stacks are
written in alphabetical order of their frames, root first, as flamegraph.pl sorts them: that view then
draws a flame graph, each call path once. (Written heaviest first, it drew a made-up timeline in which
a function called on several paths appeared as scattered blocks.)
"""

from __future__ import annotations

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
        self._by_key: dict[tuple[str, str | None, int | None], int] = {}
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
        key = (f.name, f.file or f.module, f.line)
        i = self._by_key.get(key)
        if i is None:
            i = self._by_key[key] = len(self.frames)
            self.frames.append(_frame(f))
        return i


def _sort_ranks(displays: StackDisplays) -> list[int]:
    """Per display id, the rank of its (name, file or module) among all of them: stacks compared as lists of
    ranks are in the alphabetical order of their frames, without building strings per stack."""
    keys = [(f.name, f.file or f.module or "") for f in displays.infos]
    position = {key: i for i, key in enumerate(sorted(set(keys)))}
    return [position[key] for key in keys]


class SpeedscopeExporter(Exporter):
    format = "speedscope"
    extensions = (".speedscope.json", ".json")

    def render(self, session: Session, config: ExportConfig) -> bytes:
        displays = StackDisplays(session, frame_filter(config))
        shared = _SharedFrames(displays)
        rank = _sort_ranks(displays)
        #: stack id -> (sort key, frame indices): a stack several threads ran is expanded once
        rows_of: dict[int, tuple[list[int], list[int]]] = {}
        seconds_per_sample = _seconds_per_sample(session)
        profiles: list[dict[str, Any]] = []
        processes = process_labels(session)
        #: (process label, "" in a session of one process; stack id) -> the samples of all its threads
        together: dict[tuple[str, int], int] = {}
        for thread, per in stack_counts(session, config).items():
            new = [sid for sid in per if sid not in rows_of]
            for sid, shown in zip(new, displays.many(new)):
                rows_of[sid] = ([rank[d] for d in shown], shared.indices(shown))
            rows = [(("", rows_of[sid][0]), rows_of[sid][1], n) for sid, n in per.items() if rows_of[sid][0]]
            if not rows:
                continue
            t = session.threads[thread]
            process = processes.get(t.pid, "")
            for sid, n in per.items():
                together[(process, sid)] = together.get((process, sid), 0) + n
            name = f"{process}: {thread_label(t)}" if process else thread_label(t)
            profiles.append(_sampled(name, rows, seconds_per_sample))
        profiles.sort(key=lambda p: -p["endValue"])
        if len(profiles) > 1:
            rows = []
            for (process, sid), n in together.items():
                ranks, indices = rows_of[sid]
                if ranks:
                    rows.append(((process, ranks), [shared.root(process), *indices] if process else indices, n))
            name = _together_name(len(profiles), len({process for process, _sid in together}))
            profiles.insert(0, _sampled(name, rows, seconds_per_sample))
        if not profiles:
            # an empty sampled profile keeps the file loadable when nothing was sampled (e.g. all idle)
            profiles.append(_sampled("no samples", [], seconds_per_sample))
        document = {
            "$schema": SCHEMA_URL,
            "name": profile_name(session),
            "exporter": f"nprof {__version__}",
            "activeProfileIndex": 0,
            "shared": {"frames": shared.frames},
            "profiles": profiles,
        }
        return orjson.dumps(document)


#: a row of a profile: (sort key: process label and frame ranks; frame indices, root first; samples)
_Row = tuple[tuple[str, list[int]], list[int], int]


def _sampled(name: str, rows: list[_Row], seconds_per_sample: float) -> dict[str, Any]:
    """A sampled profile of ``rows``, in the alphabetical order of their frames (root first: the flame graph
    order the module's docstring gives), each stack weighed by its samples' time. Rows that show the same
    frames (stacks that differ only in what is not shown: an address within a function, a hidden frame) are
    one entry."""
    rows.sort(key=lambda row: (row[0], row[1]))  # (by the indices too: equal stacks become neighbours)
    samples: list[list[int]] = []
    counts: list[int] = []
    for _key, indices, n in rows:
        if samples and samples[-1] == indices:
            counts[-1] += n
        else:
            samples.append(indices)
            counts.append(n)
    weights = [n * seconds_per_sample for n in counts]
    return {
        "type": "sampled",
        "name": name,
        "unit": "seconds",
        "startValue": 0,
        "endValue": sum(weights),
        "samples": samples,
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
