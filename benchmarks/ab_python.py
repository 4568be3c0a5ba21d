"""Two versions of nprof on the same CPython target, in interleaved pairs: did a change move the stall?

On this shared VM a target's elapsed time moves by ±15–30% between runs, so two versions measured in
separate benchmark runs cannot be compared. This checks out each git revision into a temporary worktree,
and for each pair records the pure-Python chain at RATE with each version (its code first on
``PYTHONPATH``, run with ``python -P`` so that the working directory does not come first), each run after
its own unprofiled baseline, alternating which goes first. It prints, per version, the slowdowns, the
target's off-CPU time per stack copied (its one thread's schedstat, as in ``bench_python``), nprof's own
CPU time per stack copied while the target ran, and, for
versions that keep it in the session, how long nprof held each stop (the steadiest of the three: it
leaves out the kernel's interrupt and wake-up).

usage: python -m benchmarks.ab_python OLD_REV NEW_REV [--pairs 8] [--rate 1000] [--interpreter PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile

from benchmarks.bench_python import DEFAULT_INTERPRETER, profilers, run_once
from profiler.profile.session import Session

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--interpreter", default=DEFAULT_INTERPRETER)
    args = p.parse_args()
    python = args.interpreter
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for name in ("old", "new"):
            trees[name] = os.path.join(tmp, name)
            rev = getattr(args, name)
            subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", trees[name], rev], check=True,
                           capture_output=True)  # fmt: skip
        try:
            rows: dict[str, list[tuple[float, float, float, float | None]]] = {name: [] for name in trees}
            command = profilers(args.rate, tmp, "unused")["nprof"]
            # -P: no working directory at the front of sys.path, or `-m profiler` would import this checkout
            # whatever PYTHONPATH says
            command.insert(1, "-P")
            for pair in range(args.pairs):
                for name in (("old", "new") if pair % 2 == 0 else ("new", "old")):
                    os.environ.pop("PYTHONPATH", None)
                    base = run_once(python, "chain", None)
                    os.environ["PYTHONPATH"] = trees[name]
                    run = run_once(python, "chain", command)
                    stall = run["target_off_cpu"] / max(run["captures"], 1) * 1e6
                    cost = run["cpu_during"] / max(run["captures"], 1) * 1e6
                    held = Session.load(command[-1]).counters.get("stop_held_median_ns")
                    rows[name].append((run["elapsed"] / base["elapsed"], stall, cost, held and held / 1e3))
        finally:
            os.environ.pop("PYTHONPATH", None)
            for tree in trees.values():
                subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], capture_output=True)
    for name, values in rows.items():
        slowdowns, stalls, costs = [v[0] for v in values], [v[1] for v in values], [v[2] for v in values]
        helds = [v[3] for v in values if v[3] is not None]
        held = f", held us per stop median {statistics.median(helds):.0f} ({min(helds):.0f}-{max(helds):.0f})" \
            if helds else ""
        print(f"{name} {getattr(args, name)}: slowdown median {statistics.median(slowdowns):.2f} "
              f"({min(slowdowns):.2f}-{max(slowdowns):.2f}), off-CPU us per stop median "
              f"{statistics.median(stalls):.0f} ({min(stalls):.0f}-{max(stalls):.0f}), nprof CPU us per stop "
              f"median {statistics.median(costs):.0f} ({min(costs):.0f}-{max(costs):.0f}){held}")  # fmt: skip


if __name__ == "__main__":
    main()
