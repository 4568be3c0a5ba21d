"""Benchmark: cold and warm cost of DWARF symbolization (file:line and inlined frames) per unique address.

Three workloads of 50 addresses each, every one with a fresh ``DwarfResolver`` (cold: sections loaded,
units parsed on demand) and then the same addresses again (warm: the per-address cache):

* ``libpython3.12 ceval``: 50 addresses inside ``_PyEval_EvalFrameDefault``, whose unit (Python/ceval.c,
  with generated_cases.c.h) is the largest of libpython (108 KB line program, thousands of inlined calls);
* ``libc spread``: 50 addresses in 50 random functions of libc, through its separate debug file (zlib
  compressed sections), so about 50 units are parsed;
* ``small C``: 50 addresses in a small gcc -O2 -g program with inline chains.

Also the first-address cost alone (section loading) for libpython and libc. Each workload runs
``--reps`` times (fresh resolver each time) and the median is reported. Writes
benchmarks/results/symbolize.json and prints a Markdown table.

usage: python -m benchmarks.bench_symbolize [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from profiler.binary.elf import ElfFile  # noqa: E402
from profiler.binary.symbols import load_symbols  # noqa: E402
from profiler.symbolize.dwarf import DwarfResolver  # noqa: E402

LIBPYTHON = os.path.expanduser("~/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0")
LIBC_DEBUG = "/usr/lib/debug/.build-id/93/ac61ec5a8eb1396f9fbd350e3169a558528a40.debug"
COUNT = 50
SMALL_C = r"""
static volatile int sink;
__attribute__((noinline)) void leaf(int x) { sink += x; }
static inline __attribute__((always_inline)) int inner(int x) { leaf(x); return x * 3; }
static inline __attribute__((always_inline)) int middle(int x) { int y = inner(x + 1); leaf(y); return y; }
static inline int outer(int x) { int z = middle(x) + inner(x); leaf(z); return z; }
int main(int argc, char **argv) { int t = 0; for (int i = 0; i < argc * 1000; i++) t += outer(i); return t & 1; }
"""


def in_function(path: str, name: str, count: int, rng: random.Random) -> list[int]:
    symbols = load_symbols(ElfFile(path))
    assert symbols is not None
    start, size = symbols.address_of(name)  # type: ignore[misc]
    return sorted(rng.sample(range(start, start + size), count))


def spread(path: str, count: int, rng: random.Random) -> list[int]:
    symbols = load_symbols(ElfFile(path))
    assert symbols is not None
    sized = [i for i in range(len(symbols)) if symbols.sizes[i] > 0]
    picks = rng.sample(sized, count)
    return sorted(int(symbols.addrs[i]) + rng.randrange(int(symbols.sizes[i])) for i in picks)


def measure(path: str, addresses: list[int]) -> dict[str, float]:
    started = time.perf_counter()
    resolver = DwarfResolver(ElfFile(path))
    resolver.resolve(addresses[:1])
    first = time.perf_counter() - started
    resolver.resolve(addresses)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    resolver.resolve(addresses)
    warm = time.perf_counter() - started
    return {"first_s": first, "cold_s": cold, "warm_s": warm, "units": resolver.units_loaded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        source, small = os.path.join(tmp, "small.c"), os.path.join(tmp, "small")
        with open(source, "w") as f:
            f.write(SMALL_C)
        subprocess.run(["gcc", "-O2", "-g", "-o", small, source], check=True)
        workloads = {
            "libpython3.12 ceval": (LIBPYTHON, in_function(LIBPYTHON, "_PyEval_EvalFrameDefault", COUNT, rng)),
            "libc spread": (LIBC_DEBUG, spread(LIBC_DEBUG, COUNT, rng)),
            "small C": (small, in_function(small, "main", min(COUNT, 40), rng)),
        }
        results = {}
        for name, (path, addresses) in workloads.items():
            runs = [measure(path, addresses) for _ in range(args.reps)]
            results[name] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            results[name]["addresses"] = len(addresses)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "symbolize.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("| workload | addresses | units parsed | first address | cold (all) | warm (all) |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['addresses']} | {r['units']:.0f} | {r['first_s'] * 1e3:.0f} ms | "
            f"{r['cold_s'] * 1e3:.0f} ms | {r['warm_s'] * 1e6:.0f} µs |"
        )


if __name__ == "__main__":
    main()
