"""Threads named as the program named them, and processes named in their headers (issue 44, point 5): a
thread read ``payer (python)``, its process's name in every thread's; ``nprof dump`` had no
``--subprocesses``. The target is a tree of Python processes (``tests/targets/python/family.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.support.profiles import dumped_threads, read_speedscope
from tests.support.targets import nprof_command, record, run_nprof, running_target
from tests.targets.python.interpreters import TARGETS, interpreter_params

FAMILY = os.path.join(TARGETS, "family.py")
#: the oldest and a middle version, which name no OS thread, and 3.14, which names each after its Python name
INTERPRETERS = [p for p in interpreter_params() if p.id in ("3.8", "3.12", "sid-3.14")]


def descendants(pid: int) -> dict[int, int]:
    """Every live descendant of ``pid``, with its parent."""
    out, parents = {}, [pid]
    while parents:
        parent = parents.pop()
        for tid in os.listdir(f"/proc/{parent}/task"):
            with open(f"/proc/{parent}/task/{tid}/children") as f:
                for child in map(int, f.read().split()):
                    out[child] = parent
                    parents.append(child)
    return out


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


@pytest.mark.parametrize("interp", INTERPRETERS)
def test_threads_are_named_as_the_program_named_them(interp, tmp_path):
    """In every output: a Python thread by its Python name alone (its kernel name is its process's, or,
    on 3.14, its Python name cut short), and a thread that gave itself a kernel name of its own by both."""
    out = str(tmp_path / "names.speedscope.json")
    with running_target([interp.path, FAMILY, "0"], ready_at=2) as target:
        record(target.pid, out, "--idle")
        dump = run_nprof("dump", "--pid", str(target.pid), "--json")
    assert dump.returncode == 0, dump.stderr
    want = {"MainThread", "payer-0", "labelled (os-label)"}
    profiles = {re.sub(r" \(tid \d+\)$", "", p.name) for p in read_speedscope(out)}
    assert profiles == want, profiles
    folded = str(tmp_path / "names.folded")
    result = run_nprof("report", str(tmp_path / "names.nprof"), "--idle", "--threads", "-o", folded)
    assert result.returncode == 0, result.stderr
    with open(folded) as f:
        roots = {re.sub(r" \(tid \d+\)$", "", line.split(";", 1)[0]) for line in f}
    assert roots == want, roots
    assert {t["name"] for t in dumped_threads(json.loads(dump.stdout))} == want


@pytest.mark.parametrize("interp", INTERPRETERS)
def test_dump_subprocesses_shows_each_process_under_its_header(interp):
    """``nprof dump --subprocesses``: the process and every descendant (a child, and its child), each with
    its pid, name, parent and command line, and its own threads, in text and in JSON; without it, the
    process alone."""
    with running_target([interp.path, FAMILY, "2"], ready_at=2) as target:
        family = descendants(target.pid)
        names = {pid: comm(pid) for pid in (target.pid, *family)}
        dump = run_nprof("dump", "--pid", str(target.pid), "--subprocesses", "--json")
        text = run_nprof("dump", "--pid", str(target.pid), "--subprocesses")
        alone = run_nprof("dump", "--pid", str(target.pid), "--json")
    for result in (dump, text, alone):
        assert result.returncode == 0, result.stderr
    assert len(family) == 2, family  # (the target's own: its child and grandchild)
    generation = {target.pid: 0}
    while len(generation) < 3:
        generation.update({pid: generation[parent] + 1 for pid, parent in family.items() if parent in generation})
    doc = json.loads(dump.stdout)
    assert doc["pid"] == target.pid
    processes = doc["processes"]
    assert [p["pid"] for p in processes] == sorted(generation, key=generation.__getitem__), "the target first"
    assert {p["pid"]: p["parent"] for p in processes} == {target.pid: None, **family}
    for process in processes:
        g = generation[process["pid"]]
        assert process["name"] == names[process["pid"]]
        assert process["command"][1:2] == [FAMILY] and process["command"][-1] == str(2 - g), process["command"]
        threads = {t["name"]: t for t in process["threads"]}
        assert set(threads) == {"MainThread", f"payer-{g}"} | ({"labelled (os-label)"} if g == 0 else set())
        python = [f["name"] for f in threads[f"payer-{g}"]["frames"] if f["kind"] == "python"]
        assert python[:1] == ["pay"], python
    [only] = json.loads(alone.stdout)["processes"]
    assert only["pid"] == target.pid and only["parent"] is None and len(only["threads"]) == 3
    headers = [line for line in text.stdout.splitlines() if line.startswith("Process ")]
    assert headers == [
        f"Process {p['pid']} ({p['name']}), "
        + (f"child of {p['parent']}, " if p["parent"] else "")
        + f"{len(p['threads'])} threads: {' '.join(p['command'])}"
        for p in processes
    ], headers
    # each process's threads follow its header
    body = text.stdout
    for p, after in zip(processes, processes[1:] + [None]):
        part = body[body.index(f"Process {p['pid']} ") : body.index(f"Process {after['pid']} ") if after else None]
        assert set(re.findall(r"^Thread (\d+) ", part, re.M)) == {str(t["tid"]) for t in p["threads"]}, part


@pytest.mark.parametrize("interp", INTERPRETERS)
def test_a_recording_of_several_processes_names_the_process_once_per_profile(interp, tmp_path):
    """With ``--subprocesses``, each thread's profile is its process's label, then the thread's own name; the
    profile of all threads, first, keeps each process's stacks under its label."""
    out = str(tmp_path / "family.speedscope.json")
    with running_target([interp.path, FAMILY, "1"], ready_at=2) as target:
        [child] = descendants(target.pid)
        record(target.pid, out, "--subprocesses")
    together, *threads = read_speedscope(out, together=True)
    named: dict[int, set[str]] = {}
    for p in threads:
        m = re.fullmatch(r"pid (\d+) \[(.*)\]: (.*) \(tid \d+\)", p.name)
        assert m and FAMILY in m[2], p.name
        named.setdefault(int(m[1]), set()).add(m[3])
    assert "payer-0" in named[target.pid] and "payer-1" in named[child], named
    assert together.name == f"all threads ({len(threads)}) of 2 processes", together.name
    for pid in (target.pid, child):
        assert [s for s in together.stacks if s[0].startswith(f"pid {pid} [") and "pay" in s], pid


def test_dump_subprocesses_of_nprof_s_own_shell_leaves_nprof_out(tmp_path):
    """``nprof dump --pid $$ --subprocesses`` from a shell: nprof is one of the shell's descendants, left out
    without a word (it said it could not follow itself), the shell's other children dumped."""
    script = f"sleep 30 & {' '.join(nprof_command('dump', '--pid', '$$', '--subprocesses', '--json'))}; kill $!"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "not following" not in result.stderr, result.stderr
    processes = json.loads(result.stdout)["processes"]
    assert [p["name"] for p in processes] == ["bash", "sleep"], [(p["pid"], p["name"]) for p in processes]
