"""Read profiles back the way a user's tools would, for statistical assertions on stacks."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass


@dataclass
class ThreadProfile:
    name: str
    stacks: Counter  #: tuple of frame names, root first -> weight


def read_speedscope(path: str) -> list[ThreadProfile]:
    with open(path) as f:
        doc = json.load(f)
    names = [frame["name"] for frame in doc["shared"]["frames"]]
    out = []
    for profile in doc["profiles"]:
        stacks: Counter = Counter()
        for sample, weight in zip(profile["samples"], profile["weights"]):
            stacks[tuple(names[i] for i in sample)] += weight
        out.append(ThreadProfile(profile["name"], stacks))
    return out


def share(stacks: Counter, predicate) -> tuple[float, float]:
    """(weight of stacks satisfying predicate, total weight)."""
    total = sum(stacks.values())
    hit = sum(w for s, w in stacks.items() if predicate(s))
    return hit, total


def ends_with(stack: tuple[str, ...], chain: tuple[str, ...]) -> bool:
    return stack[-len(chain):] == chain
