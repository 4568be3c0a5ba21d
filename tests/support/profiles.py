"""Read profiles back the way a user's tools would, for statistical assertions on stacks."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass


@dataclass
class ThreadProfile:
    name: str
    stacks: Counter  #: tuple of frame names, root first -> weight
    detailed: Counter  #: tuple of (name, file, line) frames, root first -> weight


#: the name nprof gives the first profile of a recording of several threads, which merges them all
ALL_THREADS = re.compile(r"all threads \(\d+\)( of \d+ processes)?")


def read_speedscope(path: str, together: bool = False) -> list[ThreadProfile]:
    """The file's profiles, one per thread; with ``together``, the profile of all threads too, first, where
    there is one (in a recording of several threads). Most tests look at threads, whose samples it counts
    again."""
    with open(path) as f:
        doc = json.load(f)
    frames = [(f["name"], f.get("file"), f.get("line")) for f in doc["shared"]["frames"]]
    profiles = doc["profiles"]
    if not together and len(profiles) > 1 and ALL_THREADS.fullmatch(profiles[0]["name"]):
        profiles = profiles[1:]
    out = []
    for profile in profiles:
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


def dumped_threads(doc: dict) -> list[dict]:
    """Every thread of an ``nprof dump --json`` document, of every process in it, in its order."""
    return [thread for process in doc["processes"] for thread in process["threads"]]
