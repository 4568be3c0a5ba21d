"""DWARF resolution while a recording runs, in a process of its own at idle priority, so that the end of
the recording finds the frames on disk (``frame_store.py``) instead of reading DWARF then.

The recording's frames are named at its end (DESIGN.md section 2, rule 2). ``DwarfPrefetch`` hands the
addresses of new native frames, a batch every ``FEED_INTERVAL`` (the worker started with the first, not
before the first ticks), to ``python -m profiler.symbolize.prefetch``, which resolves them with the
resolver the symbolizer builds (``symbolizer.dwarf_resolver``) and stores them. A process, not the
sampler's thread nor another of nprof's: why, and what it saves, in docs/decisions/start-up-latency.md.

The worker runs under ``SCHED_IDLE``: it takes only CPU time no one else wants, so a target that keeps
every CPU busy is not slowed, and then the end of the recording resolves what the worker did not. It is
a cache filler: a batch it cannot take (its pipe full) is dropped, it exits when its pipe closes, and its
failures are its own (the end of the recording resolves everything anyway).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy.typing as npt
import orjson

from profiler.binary.objfile import ObjectFile
from profiler.model import FrameKind

#: seconds between two batches: a recording's new frames come mostly in its first second
FEED_INTERVAL = 0.5


class DwarfPrefetch:
    """The recording's side: starts the worker, and feeds it the native frames not fed yet."""

    def __init__(self) -> None:
        self._worker: subprocess.Popen[bytes] | None = None
        self._fed = 0  #: frames of the frame table already looked at
        self.batches = self.dropped = 0

    @property
    def running(self) -> bool:
        """Started, and not closed since."""
        return self._worker is not None

    def start(self) -> bool:
        """Start the worker; False (and nothing prefetched) if it cannot be started."""
        try:
            self._worker = subprocess.Popen(
                [sys.executable, "-m", "profiler.symbolize.prefetch"], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except OSError:
            return False
        assert self._worker.stdin is not None
        os.set_blocking(self._worker.stdin.fileno(), False)
        return True

    def feed(self, columns: Mapping[str, npt.NDArray[Any]], objects: Mapping[int, ObjectFile]) -> bool:
        """Hand over the native frames of the frame table (``FrameTable.columns``) past those already fed.
        False once there is no worker to feed: it could not start, or feeding it failed (it is a cache
        filler: the recording goes on, and its end resolves what the worker did not)."""
        if self._worker is None or self._worker.stdin is None:
            return False
        try:
            self._feed(columns, objects)
        except (OSError, ValueError, TypeError):  # (orjson.JSONEncodeError is a TypeError)
            self.close()
            return False
        return self._worker is not None

    def _feed(self, columns: Mapping[str, npt.NDArray[Any]], objects: Mapping[int, ObjectFile]) -> None:
        start, self._fed = self._fed, len(columns["kind"])
        kinds, module_ids, addresses = (columns[name][start : self._fed].tolist()
                                        for name in ("kind", "module", "address"))  # fmt: skip
        by_object: dict[int, list[int]] = defaultdict(list)
        owners: dict[int, ObjectFile] = {}
        for kind, mid, address in zip(kinds, module_ids, addresses):
            obj = objects.get(mid) if kind == FrameKind.NATIVE else None
            if obj is not None:
                by_object[id(obj)].append(address)
                owners[id(obj)] = obj
        for key, rels in by_object.items():
            obj = owners[key]
            if obj.elf.opened_path is None:
                continue  # (the vdso: no DWARF)
            # paths as the bytes of the file system's names, in hex: JSON has no room for a name that is not
            # UTF-8 (``os.fsdecode`` gives it lone surrogates, which orjson refuses)
            paths = {key: _hex(value) for key, value in (("opened", obj.elf.opened_path), ("path", obj.path),
                                                         ("root", obj.root), ("target_root", obj.target_root))}
            self._send(orjson.dumps({**paths, "rels": rels}) + b"\n")

    def _send(self, line: bytes) -> None:
        if self._worker is None or self._worker.stdin is None:
            return  # (closed by an earlier line of this batch)
        try:
            written = os.write(self._worker.stdin.fileno(), line)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EPIPE):
                raise
            written = 0
        if written == len(line):
            self.batches += 1
            return
        self.dropped += 1
        if written:  # half a line in the pipe: the worker would misread the rest; it is done with
            self.close()

    def close(self, wait: float = 0.0) -> bool:
        """Close the worker's pipe: it ends after the batch it is on, waited for ``wait`` seconds at most
        (a recording does not wait). Whether it has ended."""
        worker, self._worker = self._worker, None
        if worker is None:
            return True
        if worker.stdin is not None:
            try:
                worker.stdin.close()
            except OSError:
                pass
            worker.stdin = None  # (Popen's own cleanup would close it again)
        try:
            worker.wait(wait)
        except subprocess.TimeoutExpired:
            return False
        return True


def _hex(path: str | None) -> str | None:
    return os.fsencode(path).hex() if path is not None else None


def _unhex(text: str) -> str:
    return os.fsdecode(bytes.fromhex(text))


def _serve(lines: Sequence[bytes] | None = None) -> None:
    """The worker: resolve each batch read from standard input, until it closes."""
    from profiler.binary.elf import ElfFile
    from profiler.errors import BinaryError
    from profiler.symbolize.dwarf import DwarfResolver
    from profiler.symbolize.symbolizer import dwarf_resolver

    resolvers: dict[str, DwarfResolver | None] = {}
    for line in lines if lines is not None else sys.stdin.buffer:
        try:
            batch = orjson.loads(line)
            opened, path, root = (_unhex(batch[key]) for key in ("opened", "path", "root"))
            target_root = _unhex(batch["target_root"]) if batch["target_root"] is not None else None
            rels = [int(r) for r in batch["rels"]]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            continue
        if opened not in resolvers:
            resolvers[opened] = None
            try:
                obj = ObjectFile(ElfFile(opened, display_path=path), root=root)
            except BinaryError:
                continue
            obj.target_root = target_root
            resolvers[opened] = dwarf_resolver(obj)
        resolver = resolvers[opened]
        if resolver is not None:
            resolver.resolve(rels)  # (stored by the resolver: ``frame_store.py``)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the recording's to answer; the pipe ends this
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        os.nice(19)
    try:
        _serve()
    except Exception:  # noqa: BLE001 - a cache filler: the end of the recording resolves everything anyway
        pass


if __name__ == "__main__":
    main()
