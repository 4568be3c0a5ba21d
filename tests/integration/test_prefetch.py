"""DWARF resolved while a recording runs (``profiler/symbolize/prefetch.py``): the worker process stores
the frames of the addresses it is fed, so the symbolizer at the end reads no DWARF for them."""

from __future__ import annotations

import json

import numpy as np

from profiler.binary.cache import TableCache
from profiler.binary.elf import ElfFile
from profiler.binary.objfile import ObjectFileCache
from profiler.binary.symbols import load_symbols
from profiler.model import FrameKind
from profiler.symbolize.dwarf import DwarfResolver
from profiler.symbolize.prefetch import DwarfPrefetch, _serve
from profiler.symbolize.symbolizer import dwarf_resolver


def _columns(rels: list[int], module: int = 0, kind: int = FrameKind.NATIVE) -> dict[str, np.ndarray]:
    return {"kind": np.full(len(rels), kind, dtype=np.uint8), "module": np.full(len(rels), module, dtype=np.int32),
            "address": np.array(rels, dtype=np.uint64), "offset": np.zeros(len(rels), dtype=np.int64)}  # fmt: skip


def test_the_worker_stores_what_it_is_fed_and_the_end_reads_no_dwarf(chain_fp, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(chain_fp)
    rels = [int(a) + 1 for a in load_symbols(ElfFile(chain_fp)).addrs]
    prefetch = DwarfPrefetch()
    assert prefetch.start()
    prefetch.feed(_columns(rels[:5]), {0: obj})
    prefetch.feed(_columns(rels), {0: obj})  # only the frames past the first five are sent again
    assert prefetch.batches == 2 and prefetch.dropped == 0
    assert prefetch.close(wait=60), "the worker ends when its pipe closes"
    frames = TableCache("frames", str(tmp_path / "nprof"))
    resolver = DwarfResolver(obj.debug_elf or obj.elf, obj.symbols, frame_cache=frames)
    fresh = DwarfResolver(ElfFile(chain_fp), obj.symbols)  # no store: reads the DWARF
    assert resolver.resolve(rels) == fresh.resolve(rels)
    assert resolver.units_loaded == 0 and fresh.units_loaded > 0, "every frame came from the worker's store"


def test_the_worker_skips_what_it_cannot_read(tmp_path, monkeypatch):
    """A bad line or a file gone: skipped, the rest served."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gone = {"opened": b"/nonexistent".hex(), "path": b"/x".hex(), "root": b"/".hex(), "target_root": None,
            "rels": [1]}  # (paths travel as the hex of their bytes)
    _serve([b"not json\n", json.dumps(gone).encode() + b"\n", b'{"opened": 3}\n'])
    assert not (tmp_path / "nprof").exists(), "nothing was stored"


def test_runtime_frames_and_unknown_modules_are_not_fed(chain_fp, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(chain_fp)
    prefetch = DwarfPrefetch()
    assert prefetch.start()
    prefetch.feed(_columns([1, 2], kind=FrameKind.RUNTIME), {0: obj})
    prefetch.feed(_columns([1, 2], module=7), {0: obj})
    assert prefetch.batches == 0
    assert prefetch.close(wait=60)
    assert dwarf_resolver(obj) is not None


def test_a_file_whose_path_is_not_utf8_is_fed_too(chain_fp, tmp_path, monkeypatch):
    """Paths travel as their bytes: JSON has no room for a name that is not UTF-8 (a recording of such a
    program ended "stopped by an internal error" when orjson refused its path)."""
    import os
    import shutil

    from tests.support.targets import NOT_UTF8_NAME

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    directory = tmp_path / NOT_UTF8_NAME
    directory.mkdir()
    copy = str(directory / "chain")
    shutil.copy2(chain_fp, copy)
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(copy)
    rels = [int(a) + 1 for a in load_symbols(ElfFile(copy)).addrs]
    prefetch = DwarfPrefetch()
    assert prefetch.start()
    assert prefetch.feed(_columns(rels), {0: obj}) and prefetch.batches == 1
    assert prefetch.close(wait=60)
    resolver = DwarfResolver(obj.elf, obj.symbols, frame_cache=TableCache("frames", str(tmp_path / "nprof")))
    resolver.resolve(rels)
    assert resolver.units_loaded == 0 and os.path.exists(copy)
