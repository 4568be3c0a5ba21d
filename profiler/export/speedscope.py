"""speedscope's file format (https://www.speedscope.app/file-format-schema.json), written with orjson.

One *sampled* profile per thread, all sharing one frame table. A frame of the table is a function, its file
(whole) and the line it is declared at; with ``--lines``, a function and the line sampled, one frame per
line (``tree/frame_identity.py``). Samples are aggregated: each distinct stack
appears once with its sample count as weight, so the file's size is bounded by the number of distinct
stacks (py-spy writes one entry per sample). Weights are in seconds: each sample stands for the time between
two ticks of the recording.

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
from profiler.tree.calltree import frame_filter, process_labels, stack_counts
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
        displays = StackDisplays(session, frame_filter(config), config.lines, config.hide_interpreter)
        shared = _SharedFrames(displays)
        rank = _sort_ranks(displays)
        #: stack id -> (sort key, frame indices): a stack several threads ran is expanded once
        rows_of: dict[int, tuple[list[int], list[int]]] = {}
        seconds_per_sample = _seconds_per_sample(session)
        profiles: list[dict[str, Any]] = []
        processes = process_labels(session)
        for thread, per in stack_counts(session, config).items():
            new = [sid for sid in per if sid not in rows_of]
            for sid, shown in zip(new, displays.many(new)):
                rows_of[sid] = ([rank[d] for d in shown], shared.indices(shown))
            rows = [(*rows_of[sid], n * seconds_per_sample) for sid, n in per.items() if rows_of[sid][0]]
            if not rows:
                continue
            rows.sort(key=lambda row: row[0])
            samples = [row[1] for row in rows]
            weights = [row[2] for row in rows]
            t = session.threads[thread]
            name = f"{t.name} (tid {t.tid})"
            if t.pid in processes:
                name = f"{processes[t.pid]}: {name}"
            total = sum(weights)
            profiles.append(
                {
                    "type": "sampled",
                    "name": name,
                    "unit": "seconds",
                    "startValue": 0,
                    "endValue": total,
                    "samples": samples,
                    "weights": weights,
                }
            )
        profiles.sort(key=lambda p: -p["endValue"])
        if not profiles:
            # an empty sampled profile keeps the file loadable when nothing was sampled (e.g. all idle)
            profiles.append(
                {"type": "sampled", "name": "no samples", "unit": "seconds", "startValue": 0, "endValue": 0,
                 "samples": [], "weights": []}  # fmt: skip
            )
        document = {
            "$schema": SCHEMA_URL,
            "name": profile_name(session),
            "exporter": f"nprof {__version__}",
            "activeProfileIndex": 0,
            "shared": {"frames": shared.frames},
            "profiles": profiles,
        }
        return orjson.dumps(document)


def _seconds_per_sample(session: Session) -> float:
    ticks = session.counters.get("ticks", 0)
    if ticks and session.meta.duration > 0:
        return session.meta.duration / ticks
    return 1.0 / session.meta.rate if session.meta.rate > 0 else 1.0
