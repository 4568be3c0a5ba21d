"""The checkouts a benchmark compares: ``--tree PATH``, repeated (a worktree of an older commit, say; this
one by default), each run as its own nprof: from its directory, importing its own ``profiler``."""

from __future__ import annotations

import argparse
import os
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tree", action="append", default=[], help="a checkout to compare (default: this one)")


def trees(args: argparse.Namespace) -> list[str]:
    """The checkouts asked for, as absolute paths (each is a child's working directory)."""
    return [os.path.abspath(t) for t in args.tree] or [REPO]


def run_in(tree: str) -> dict[str, Any]:
    """``subprocess`` keywords that make a child Python run ``tree``'s nprof."""
    return {"cwd": tree, "env": dict(os.environ, PYTHONPATH=tree)}
