"""Whether a recording's Python frames sit where they ran, checked against readelf's symbol tables.

Ground truth for "an eval-loop activation": the native frame's address lies in ``_PyEval_EvalFrameDefault``
or one of its split parts (``.cold``, ``.part.N``...), as ``readelf -sW`` lists them in the interpreter's own
symbol table, or in its debug file's (found by build-id under ``/usr/lib/debug`` of the host and of the root
given). nprof's own symbol reading is not used, so a recording whose eval loop nprof could not name (a
stripped interpreter without its debug file) is checked all the same.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache

from profiler.model import FrameKind, SyntheticFrame
from profiler.profile.session import Session

_SYMBOL = re.compile(r"^\s*\d+:\s+([0-9a-f]+)\s+(\d+)\s+FUNC\s+\S+\s+\S+\s+\S+\s+(\S+)$")
_BUILD_ID = re.compile(r"Build ID:\s*([0-9a-f]+)")
_INTERPRETER = re.compile(r"^(lib)?python3\.\d+")


@cache
def eval_loop_ranges(path: str, root: str = "/") -> tuple[tuple[int, int], ...]:
    """``[start, end)`` svma ranges of the eval loop's parts in the ELF file at ``path``, from its own
    ``.symtab`` or, where it has none, its debug file's (under ``/usr/lib/debug`` of ``root`` and of /)."""
    for candidate in (path, *_debug_files(path, root)):
        ranges = _eval_symbols(candidate)
        if any(end - start > 4096 for start, end in ranges):  # (a stripped .dynsym has the stub alone)
            return ranges
    return _eval_symbols(path)


def _eval_symbols(path: str) -> tuple[tuple[int, int], ...]:
    out = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True, check=False).stdout
    found = set()
    for line in out.splitlines():
        match = _SYMBOL.match(line)
        if match and match.group(3).split(".")[0] == "_PyEval_EvalFrameDefault" and int(match.group(2)):
            start = int(match.group(1), 16)
            found.add((start, start + int(match.group(2))))
    return tuple(sorted(found))


def _debug_files(path: str, root: str) -> list[str]:
    notes = subprocess.run(["readelf", "-nW", path], capture_output=True, text=True, check=False).stdout
    match = _BUILD_ID.search(notes)
    if match is None:
        return []
    build_id = match.group(1)
    name = os.path.join("usr/lib/debug/.build-id", build_id[:2], build_id[2:] + ".debug")
    return [p for p in (os.path.join(root, name), os.path.join("/", name)) if os.path.isfile(p)]


@dataclass
class Placement:
    with_python: int = 0  #: samples with Python frames
    right: int = 0  #: of those, every Python group inward of an eval-loop activation, nothing unanchored
    samples: int = 0
    named: int = 0  #: activations (native frames right under Python ones) that nprof named as the eval loop
    activations: int = 0
    wrong: tuple[str, ...] = ()  #: a few of the wrong stacks, for the failure message

    @property
    def share(self) -> float:
        return self.right / self.with_python if self.with_python else 0.0


def placement(session_path: str, root: str = "/") -> Placement:
    """How many samples of a recording hold their Python frames where they ran (the module docstring)."""
    s = Session.load(session_path)
    columns = s.frames.columns()
    kinds, modules, addresses = columns["kind"], columns["module"], columns["address"]
    names = [info.name for info in s.frame_info] if s.frame_info else []
    ranges = {m.id: eval_loop_ranges(m.path, root) for m in s.modules
              if _INTERPRETER.match(os.path.basename(m.path))}  # fmt: skip
    out = Placement()
    wrong: list[str] = []
    for (_thread, sid, _stop, _cls), n in s.samples.items():
        frames = s.stacks.frames(sid)  # outermost first
        out.samples += n
        if not any(kinds[f] == FrameKind.RUNTIME for f in frames):
            continue
        out.with_python += n
        ok = True
        for outer, inner in zip(frames, frames[1:]):
            if kinds[outer] == FrameKind.SYNTHETIC and addresses[outer] == SyntheticFrame.UNANCHORED:
                ok = False
            if kinds[inner] == FrameKind.RUNTIME and kinds[outer] != FrameKind.RUNTIME:
                out.activations += n
                spans = ranges.get(int(modules[outer]), ())
                rel = int(addresses[outer])
                if kinds[outer] != FrameKind.NATIVE or not any(lo <= rel < hi for lo, hi in spans):
                    ok = False
                elif names and names[outer].split(".")[0] == "_PyEval_EvalFrameDefault":
                    out.named += n
        if ok:
            out.right += n
        elif len(wrong) < 3:
            wrong.append(";".join(names[f] if names else str(f) for f in frames[-12:]))
    out.wrong = tuple(wrong)
    return out
