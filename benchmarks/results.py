"""Where benchmark runs keep their raw rows: one JSON file per benchmark under benchmarks/results/."""

from __future__ import annotations

import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_rows(path: str, rows: list[dict]) -> None:
    """Save a run's raw rows (every repetition, before medians), for docs/benchmarks.md to cite."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
