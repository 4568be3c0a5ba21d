"""The command line every sampler of the capture benchmark shares with the C floor sampler:
``PID RATE SECONDS STACK_BYTES``, then its own options."""

from __future__ import annotations

import argparse


def parser(description: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("pid", type=int)
    p.add_argument("rate", type=float)
    p.add_argument("seconds", type=float)
    p.add_argument("stack_bytes", type=int)
    return p
