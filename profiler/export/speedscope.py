"""speedscope's file format (https://www.speedscope.app/file-format-schema.json), written with orjson.

One *sampled* profile per thread, all sharing one frame table. Samples are aggregated: each distinct stack
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

import orjson

from profiler import __version__
from profiler.config import ExportConfig
from profiler.model import FrameInfo
from profiler.sampling.session import Session
from profiler.tree.calltree import frame_filter, process_labels, stack_counts, stack_display

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


class SpeedscopeExporter:
    format = "speedscope"
    extensions = (".speedscope.json", ".json")

    def render(self, session: Session, config: ExportConfig) -> bytes:
        # speedscope identifies frames by index: frames that look the same (a function sampled at several
        # addresses) must share one index, or the flame graph shows the function as several nodes
        shared: list[dict[str, object]] = []
        index_of: dict[tuple[str, str | None, int | None], int] = {}

        def index(f: FrameInfo) -> int:
            key = (f.name, f.file or f.module, f.line)
            i = index_of.get(key)
            if i is None:
                i = index_of[key] = len(shared)
                shared.append(_frame(f))
            return i

        keep = frame_filter(config)
        seconds_per_sample = _seconds_per_sample(session)
        profiles = []
        processes = process_labels(session)
        for thread, per in stack_counts(session, config).items():
            rows: list[tuple[tuple[tuple[str, str], ...], list[int], float]] = []
            for sid, n in per.items():
                frames = stack_display(session, sid, keep)
                if frames:
                    order = tuple((f.name, f.file or f.module or "") for f in frames)
                    rows.append((order, [index(f) for f in frames], n * seconds_per_sample))
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
            "shared": {"frames": shared},
            "profiles": profiles,
        }
        return orjson.dumps(document)


def _seconds_per_sample(session: Session) -> float:
    ticks = session.counters.get("ticks", 0)
    if ticks and session.meta.duration > 0:
        return session.meta.duration / ticks
    return 1.0 / session.meta.rate if session.meta.rate > 0 else 1.0
