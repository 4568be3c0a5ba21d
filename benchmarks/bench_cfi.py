"""Benchmark: the costs of DWARF CFI unwinding (issue 3), one number each, printed as JSON.

* ``tables``: attaching to libpython3.12 + libc: ELF open, table ready to look up, and the first
  ``HOT_PCS`` lookups per library (which decode the FDEs they hit); cold (empty disk cache) and warm
  (the cache holds what the previous session decoded, saved with ``save_unwind_tables``). Also the cost
  of decoding a whole table up front, per FDE, and per FDE with pyelftools: the reasons tables are
  decoded lazily, and by nprof's own decoder.
* ``unwind``: cost per frame and per sample of ``NativeUnwinder.unwind`` on copies of real stacks:
  a C program built ``-O2 -fomit-frame-pointer`` recursing to ~31 frames, and CPython 3.12 running a
  pure-Python recursion (native frames through libpython). ``cold`` is the first pass (empty memo, FDEs
  decoded on the way); ``warm`` the best of several passes once the per-pc memo is filled;
  ``taking_over`` the same passes with each thread's walks taking over its previous walk's outer frames
  where they still hold, as a recording's walks do (``unwind/reuse.py``).

The machine is a shared 2-vCPU box: warm numbers are the best of ``--reps`` passes.

usage: python -m benchmarks.bench_cfi [--reps 15] [--samples 200]
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from profiler.binary.cache import TableCache  # noqa: E402
from profiler.binary.objfile import ObjectFile, ObjectFileCache  # noqa: E402
from profiler.target.process import TargetProcess  # noqa: E402
from profiler.target.tracer import Tracer  # noqa: E402
from profiler.unwind.address_space import AddressSpace  # noqa: E402
from profiler.unwind.policy import NativeUnwinder  # noqa: E402
from profiler.unwind.stack import StackWindow  # noqa: E402

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
LIBPYTHON312 = (glob.glob("/root/.pyenv/versions/3.12*/lib/libpython3.12.so.1.0") or [""])[0]
PYTHON312 = (glob.glob("/root/.pyenv/versions/3.12*/bin/python3.12") or [""])[0]
#: pcs a session is assumed to have hit per library before it saved its tables (a typical profile)
HOT_PCS = 300
#: stacks at least this deep are reported apart: the issue's goal is stated for ~30-frame stacks
DEEP_FRAMES = 25


def touch(objs: list[ObjectFile], pcs: int) -> None:
    """Look up ``pcs`` random addresses of each file's code, as the first samples of a session would."""
    rng = random.Random(1)
    for obj in objs:
        lo, hi = obj.elf.executable_ranges()[0]
        for _ in range(pcs):
            obj.unwind_rule(rng.randrange(lo, hi))


def attach_once(cache_dir: str, paths: list[str]) -> tuple[dict[str, float], ObjectFileCache]:
    """One attach: open the files, make their tables ready, then serve HOT_PCS lookups each (seconds)."""
    objects = ObjectFileCache(TableCache("cfi", cache_dir))
    t0 = time.perf_counter()
    objs = [objects.open(p, p) for p in paths]
    t1 = time.perf_counter()
    for obj in objs:
        assert obj.unwind_table is not None, obj.unwind_notes
    t2 = time.perf_counter()
    touch(objs, HOT_PCS)
    t3 = time.perf_counter()
    return {"elf_open": t1 - t0, "table_ready": t2 - t1, "first_lookups": t3 - t2}, objects


def bench_tables(reps: int) -> dict[str, object]:
    paths = [p for p in (LIBPYTHON312, LIBC) if p and os.path.exists(p)]
    out: dict[str, object] = {"libraries": paths, "lookups_per_library": HOT_PCS}
    best: dict[str, float] = {}
    for _ in range(max(3, reps // 3)):
        with tempfile.TemporaryDirectory() as cache_dir:
            cold, objects = attach_once(cache_dir, paths)  # empty cache
            tables = [o.unwind_table for o in objects.objects()]
            out["fdes_decoded_by_the_lookups"] = sum(t.stats.decoded_fdes for t in tables if t is not None)
            objects.save_unwind_tables()  # what the end of the first session stores
            warm, _objects = attach_once(cache_dir, paths)
        for prefix, times in (("cold", cold), ("warm", warm)):
            for name, value in times.items():
                key = f"{prefix}_{name}_ms"
                best[key] = min(best.get(key, float("inf")), value * 1e3)
    out.update({k: round(v, 2) for k, v in best.items()})
    out["cold_attach_ms"] = round(best["cold_elf_open_ms"] + best["cold_table_ready_ms"], 2)
    out["warm_attach_ms"] = round(best["warm_elf_open_ms"] + best["warm_table_ready_ms"], 2)
    for path in paths:
        name = os.path.basename(path)
        _times, objects = attach_once(tempfile.mkdtemp(), [path])
        table = objects.objects()[0].unwind_table
        assert table is not None
        t0 = time.perf_counter()
        table.compile_all()
        whole = time.perf_counter() - t0
        out[f"{name}_fdes"] = len(table)
        out[f"{name}_rows"] = table.columns.count
        out[f"{name}_decode_whole_table_ms"] = round(whole * 1e3, 1)
        out[f"{name}_decode_us_per_fde"] = round(whole / len(table) * 1e6, 1)
        out[f"{name}_pyelftools_us_per_fde"] = round(pyelftools_per_fde(path) * 1e6, 1)
    out.update(memo_costs())
    return out


def pyelftools_per_fde(path: str, n: int = 300) -> float:
    """pyelftools' ``CallFrameInfo._parse_entry_at`` + ``get_decoded`` for n FDEs (for comparison)."""
    from elftools.dwarf.callframe import FDE, CallFrameInfo
    from elftools.dwarf.structs import DWARFStructs
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(".eh_frame")
        data, addr = sec.data(), sec["sh_addr"]
    from profiler.binary.cfi.locate import find_cfi_sources
    from profiler.binary.elf import ElfFile

    offsets = find_cfi_sources(ElfFile(path))[0][0].fde_index.offsets.tolist()[:n]
    structs = DWARFStructs(little_endian=True, dwarf_format=32, address_size=8)
    cfi = CallFrameInfo(io.BytesIO(data), len(data), addr, structs, for_eh_frame=True)
    t0 = time.perf_counter()
    for off in offsets:
        entry = cfi._parse_entry_at(off)
        if isinstance(entry, FDE):
            try:
                entry.get_decoded()
            except Exception:  # pyelftools 0.33 fails on DW_CFA_GNU_args_size
                pass
    return (time.perf_counter() - t0) / len(offsets)


def memo_costs() -> dict[str, float]:
    _t, objects = attach_once(tempfile.mkdtemp(), [LIBC])
    table = objects.objects()[0].unwind_table
    assert table is not None
    pcs = list(range(0x27282, 0x27282 + 2000))
    t0 = time.perf_counter()
    for pc in pcs:
        table.rule_for(pc)
    miss = (time.perf_counter() - t0) / len(pcs)
    t0 = time.perf_counter()
    for _ in range(10):
        for pc in pcs:
            table.rule_for(pc)
    hit = (time.perf_counter() - t0) / (10 * len(pcs))
    return {"rule_memo_miss_us": round(miss * 1e6, 2), "rule_memo_hit_ns": round(hit * 1e9, 1)}


Snapshot = tuple[int, list[int], StackWindow]  #: (thread id, registers, stack copy)


def capture_snapshots(argv: list[str], samples: int) -> tuple[list[Snapshot], NativeUnwinder, subprocess.Popen]:
    """Snapshots of a running target, taken the way the sampler takes them (full DWARF register set).

    ``argv`` holds "FD" where the target expects its readiness pipe. The caller kills the target."""
    r, w = os.pipe()
    proc = subprocess.Popen([str(w) if a == "FD" else a for a in argv], pass_fds=[w], stdout=subprocess.DEVNULL)
    os.close(w)
    tracer = Tracer()
    snaps: list[Snapshot] = []
    try:
        if os.read(r, 6) != b"ready\n":
            raise RuntimeError(f"{argv[0]} did not start")
        process = TargetProcess(proc.pid)
        tracer.add_process(process)
        space = AddressSpace(process, ObjectFileCache(TableCache("cfi", enabled=False)))
        while len(snaps) < samples:
            for c in tracer.capture(tracer.seized.sync(proc.pid)):
                g = c.slot.regs
                regs = [g.rax, g.rdx, g.rcx, g.rbx, g.rsi, g.rdi, g.rbp, g.rsp,
                        g.r8, g.r9, g.r10, g.r11, g.r12, g.r13, g.r14, g.r15, g.rip]  # fmt: skip
                window = StackWindow(bytes(c.stack), c.stack_base, c.stack_len == tracer.stack_bytes)
                snaps.append((c.thread.tid, regs, window))
            tracer.pump(time.monotonic() + 0.003)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        os.close(r)
        tracer.detach_all()
    return snaps, NativeUnwinder(space), proc


def bench_unwind(name: str, argv: list[str], samples: int, reps: int) -> dict[str, object]:
    snaps, unwinder, proc = capture_snapshots(argv, samples)
    try:
        t0 = time.perf_counter()
        stacks = [unwinder.unwind(regs, window) for _tid, regs, window in snaps]
        cold = time.perf_counter() - t0
        frames = sum(len(s.frames) for s in stacks)
        deep = [snap for snap, s in zip(snaps, stacks) if len(s.frames) >= DEEP_FRAMES]
        deep_frames = sum(len(s.frames) for s in stacks if len(s.frames) >= DEEP_FRAMES)
        best, best_deep = _best_pass(unwinder, snaps, reps), _best_pass(unwinder, deep, reps)
        best_reuse = _best_pass(unwinder, snaps, reps, reuse=True)
    finally:
        proc.kill()
        proc.wait()
    stops: dict[str, int] = {}
    for s in stacks:
        stops[s.stop.name] = stops.get(s.stop.name, 0) + 1
    out: dict[str, object] = {
        "target": name,
        "samples": len(snaps),
        "frames_per_sample": round(frames / len(snaps), 1),
        "stop_reasons": stops,
        "cold_us_per_frame": round(cold / frames * 1e6, 2),
        "warm_us_per_frame": round(best / frames * 1e6, 2),
        "warm_us_per_sample": round(best / len(snaps) * 1e6, 1),
        "warm_us_per_sample_taking_over": round(best_reuse / len(snaps) * 1e6, 1),
    }
    if deep:
        out[f"samples_with_{DEEP_FRAMES}+_frames"] = len(deep)
        out["deep_frames_per_sample"] = round(deep_frames / len(deep), 1)
        out["deep_warm_us_per_frame"] = round(best_deep / deep_frames * 1e6, 2)
        out["deep_warm_us_per_sample"] = round(best_deep / len(deep) * 1e6, 1)
    return out


def _best_pass(unwinder: NativeUnwinder, snaps: list[Snapshot], reps: int, reuse: bool = False) -> float:
    """The fastest of ``reps`` passes over ``snaps``, in CPU time of this process: the machine is shared,
    and wall time would count the time other processes held the CPU. ``reuse``: each thread's walks take
    over its previous walk's frames where they hold, as a recording's do (``unwind/reuse.py``); each pass
    starts with none kept (its threads are keyed anew)."""
    best = float("inf")
    for rep in range(reps):
        t0 = time.process_time()
        for tid, regs, window in snaps:
            unwinder.unwind(regs, window, (rep, tid) if reuse else None)
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    result: dict[str, object] = {"tables": bench_tables(args.reps), "unwind": []}
    with tempfile.TemporaryDirectory() as build:
        binary = os.path.join(build, "chain_nofp")
        source = os.path.join(REPO, "tests", "targets", "chain.c")
        subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", binary, source], check=True)
        unwind = [bench_unwind("c_-O2_-fomit-frame-pointer_depth26", [binary, "FD", "26"], args.samples, args.reps)]
        if PYTHON312:
            script = os.path.join(REPO, "tests", "targets", "python", "chain.py")
            argv = [PYTHON312, script, "FD", "8"]
            unwind.append(bench_unwind("python3.12_pure_python", argv, args.samples, args.reps))
    result["unwind"] = unwind
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
