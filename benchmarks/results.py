"""Where benchmark runs keep their raw rows (one JSON file per benchmark under benchmarks/results/), and
the one way their tables give a measure over repetitions."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_rows(path: str, rows: list[dict]) -> None:
    """Save a run's raw rows (every repetition, before medians), for docs/benchmarks.md to cite."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


def spread(values: Sequence[float]) -> str:
    """A table cell for one measure over repetitions: the median, with the range (this machine's medians
    move between runs, so the range is always shown)."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"
