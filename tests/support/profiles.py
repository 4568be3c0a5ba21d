"""Read profiles back the way a user's tools would, for statistical assertions on stacks."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass


@dataclass
class ThreadProfile:
    name: str
    stacks: Counter  #: tuple of frame names, root first -> weight
    detailed: Counter  #: tuple of (name, file, line) frames, root first -> weight


def read_speedscope(path: str) -> list[ThreadProfile]:
    with open(path) as f:
        doc = json.load(f)
    frames = [(f["name"], f.get("file"), f.get("line")) for f in doc["shared"]["frames"]]
    out = []
    for profile in doc["profiles"]:
        stacks: Counter = Counter()
        detailed: Counter = Counter()
        for sample, weight in zip(profile["samples"], profile["weights"]):
            stacks[tuple(frames[i][0] for i in sample)] += weight
            detailed[tuple(frames[i] for i in sample)] += weight
        out.append(ThreadProfile(profile["name"], stacks, detailed))
    return out


def subsequence(stack: tuple[str, ...], chain: tuple[str, ...]) -> bool:
    """``chain`` appears in ``stack`` in order (other frames may sit between its elements)."""
    it = iter(stack)
    return all(any(frame == wanted for frame in it) for wanted in chain)


def share(stacks: Counter, predicate) -> tuple[float, float]:
    """(weight of stacks satisfying predicate, total weight)."""
    total = sum(stacks.values())
    hit = sum(w for s, w in stacks.items() if predicate(s))
    return hit, total


def ends_with(stack: tuple[str, ...], chain: tuple[str, ...]) -> bool:
    return stack[-len(chain):] == chain
