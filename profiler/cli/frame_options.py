"""The options that say what a frame of the outputs is, shared by ``record`` and ``report`` (a saved session
renders either way)."""

from __future__ import annotations

import argparse


def add_frame_arguments(p: argparse.ArgumentParser) -> None:
    """``--function`` (the default) and ``--lines``, which set ``args.lines``."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--lines", dest="lines", action="store_true", default=False,
                       help="a frame per function and line sampled (py-spy's default view): one tower per line")
    group.add_argument("--function", dest="lines", action="store_false",
                       help="a frame per function, whichever line was sampled (the default); lines are in "
                       "`nprof dump`, and in the session for --lines")  # fmt: skip
