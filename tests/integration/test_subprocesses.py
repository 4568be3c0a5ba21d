"""--subprocesses: children that exist at attach time and children born (and exec'd) during the recording."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from profiler.profile.session import Session
from profiler.target.procfs import tracer_process
from tests.support.profiles import ends_with, read_speedscope
from tests.support.targets import (
    assert_running_free,
    nprof_command,
    run_nprof,
    run_nprof_with,
    running_target,
    wait_until,
)  # fmt: skip


def traced_children(pid: int) -> set[int]:
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out.update(int(c) for c in f.read().split())
    return out


def tracer_of(pid: int) -> int:
    """The process that traces ``pid`` (0: none)."""
    with open(f"/proc/{pid}/status") as f:
        return tracer_process(int(next(line for line in f if line.startswith("TracerPid:")).split()[1]))


def test_children_are_followed(forker_fp, chain_fp, tmp_path):
    out = str(tmp_path / "family.speedscope.json")
    with running_target([forker_fp, chain_fp]) as parent:
        nprof = subprocess.Popen(
            nprof_command("record", "--pid", str(parent.pid), "--subprocesses", "-d", "3", "-o", out),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # once the first child is followed, ask the parent for a second one that execs chain-fp
        assert wait_until(lambda: any(tracer_of(c) == nprof.pid for c in traced_children(parent.pid)), 30)
        parent.send_signal(signal.SIGUSR1)
        stdout, stderr = nprof.communicate(timeout=60)
        assert nprof.returncode == 0, stderr
    together, *profiles = read_speedscope(out, together=True)
    by_pid = {}
    for p in profiles:
        assert p.name.startswith("pid "), p.name
        by_pid.setdefault(int(p.name.split()[1]), []).append(p)
    assert parent.pid in by_pid and len(by_pid) >= 3, [p.name for p in profiles]
    # the first profile is every thread's, each process the root of its own stacks
    assert together.name == f"all threads ({len(profiles)}) of {len(by_pid)} processes", together.name
    assert {int(stack[0].split()[1]) for stack in together.stacks} == set(by_pid), set(together.stacks)
    chains = {
        "parent": ("main", "parent_work", "spin"),
        "child A": ("main", "child_a_work", "spin"),
        "child B (exec'd)": ("main", "a", "b", "c", "spin"),
    }
    for label, chain in chains.items():
        owners = [pid for pid, ps in by_pid.items() if any(ends_with(s, chain) for p in ps for s in p.stacks)]
        assert owners, f"{label}: chain {chain} in no profile"
    exec_child = [
        pid for pid, ps in by_pid.items() if any(ends_with(s, ("a", "b", "c", "spin")) for p in ps for s in p.stacks)
    ]
    assert any(chain_fp in p.name for p in by_pid[exec_child[0]]), "a child's profile names its command line"
    # folded output has each process as a root frame, so processes are not merged into one tree
    folded = str(tmp_path / "family.folded")
    result = run_nprof("report", str(tmp_path / "family.nprof"), "-o", folded)
    assert result.returncode == 0, result.stderr
    with open(folded) as f:
        roots = {line.split(";", 1)[0] for line in f}
    assert {int(r.split()[1]) for r in roots} == set(by_pid) and all(r.startswith("pid ") for r in roots), roots
    assert any(chain_fp in r for r in roots if int(r.split()[1]) == exec_child[0]), roots


#: a parent that starts a busy child, waits until nprof traces it, kills it with SIGTERM and exits 0
_PARENT_KILLS_ITS_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:  # until nprof follows the child (its TracerPid is set)
    with open(f"/proc/{child.pid}/status") as f:
        if int(next(line for line in f if line.startswith("TracerPid:")).split()[1]):
            break
    time.sleep(0.01)
else:
    sys.exit(3)
child.terminate()
child.wait()
"""


def test_the_summary_gives_the_targets_own_exit_status(tmp_path):
    """A followed child killed by a signal does not make the summary say the target was killed."""
    out = str(tmp_path / "family.folded")
    result = run_nprof("record", "--subprocesses", "-o", out, "--", sys.executable, "-c", _PARENT_KILLS_ITS_CHILD)
    assert result.returncode == 0, result.stderr
    assert "target exited (status 0)" in result.stderr, result.stderr
    statuses = Session.load(str(tmp_path / "family.nprof")).meta.exit_status
    assert sorted(statuses.values()) == [-signal.SIGTERM, 0], statuses


_SPAWNS_SHORT_CHILDREN = """
import subprocess, time
end = time.monotonic() + 1.5
while time.monotonic() < end:
    subprocess.run(["true"])
"""


def test_children_that_exit_before_the_attach_are_not_news(tmp_path):
    """A parent running short commands back to back (a build, a shell script): a child gone before nprof
    could attach it is counted, not reported."""
    out = str(tmp_path / "spawner.folded")
    result = run_nprof("record", "--subprocesses", "-o", out, "--", sys.executable, "-c", _SPAWNS_SHORT_CHILDREN)
    assert result.returncode == 0, result.stderr
    assert "not following child" not in result.stderr, result.stderr
    counters = Session.load(str(tmp_path / "spawner.nprof")).counters
    assert "children_not_followed" not in counters, counters


_SPAWNS_SHORT_PYTHONS = """
import subprocess, sys, time
end = time.monotonic() + 2
while time.monotonic() < end:
    subprocess.run([sys.executable, "-c", "pass"])
"""


def test_python_children_that_exit_before_their_runtime_is_found_are_not_news(tmp_path):
    """Short Python children (``python -m json.tool`` under ``python -m test``), attached right after their
    exec: most exit before the next look finds libpython mapped. They were profiled natively all their
    lives, which is no news at the end of the recording either (it used to say, for each, that it was "not
    a CPython process")."""
    out = str(tmp_path / "pythons.folded")
    result = run_nprof("record", "--subprocesses", "-o", out, "--", sys.executable, "-c", _SPAWNS_SHORT_PYTHONS)
    assert result.returncode == 0, result.stderr
    assert "not a CPython process" not in result.stderr, result.stderr


def test_a_child_sharing_its_parents_memory_is_not_followed(vm_sharer_fp, tmp_path):
    """A vfork child before its exec runs in its parent's memory: what nprof would read as its stack and its
    runtime's state is the parent's. It is followed only once it has exec'd (this one never does)."""
    out = str(tmp_path / "shared.folded")
    with running_target([vm_sharer_fp]) as target:
        [child] = traced_children(target.pid)
        result = run_nprof("record", "--subprocesses", "--pid", str(target.pid), "-d", "1", "-o", out)
        assert result.returncode == 0, result.stderr
        assert tracer_of(child) == 0 and tracer_of(target.pid) == 0
    meta = Session.load(str(tmp_path / "shared.nprof")).meta
    assert set(meta.processes) == {target.pid}, meta.processes


_PYTHON_FAMILY = """
import subprocess, sys, time

CHILD = '''
import time
def child_work():
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        sum(range(1000))
child_work()
'''

def parent_work():
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        sorted(range(1000), reverse=True)

for _ in range(2):
    parent_work()
    subprocess.run([sys.executable, "-c", CHILD], check=True)
"""


def test_python_children_have_their_own_python_frames(tmp_path):
    """Python processes started by a Python process: each one's frames are named from its own memory (a
    code object's address means nothing in another process)."""
    out = str(tmp_path / "family.speedscope.json")
    result = run_nprof("record", "--subprocesses", "-r", "200", "-o", out, "--", sys.executable, "-c", _PYTHON_FAMILY)
    assert result.returncode == 0, result.stderr
    profiles = read_speedscope(out)
    stacks = [s for p in profiles for s in p.stacks]
    unknown = [s for s in stacks if "<unknown Python code>" in s]
    assert not unknown, f"{len(unknown)} of {len(stacks)} stacks hold unknown Python code: {unknown[:2]}"
    children = [p for p in profiles if any("child_work" in s for s in p.stacks)]
    assert len(children) == 2, [p.name for p in profiles]
    assert any("parent_work" in s for p in profiles for s in p.stacks)


#: a daemon the classic way (fork, setsid, fork; each parent exits at once; standard streams to /dev/null),
#: busy in ``daemon_work`` until argv[2] exists or for argv[3] seconds; its pid is written to argv[1]
_DAEMONIZES = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])

def daemon_work():
    end = time.monotonic() + float(sys.argv[3])
    while time.monotonic() < end and not os.path.exists(sys.argv[2]):
        sum(range(1000))

daemon_work()
"""


def _daemon_seconds(out: str, parent: int) -> tuple[float, float]:
    """(seconds sampled in ``daemon_work``, all seconds sampled) in the profiles of processes other than
    ``parent``."""
    profiles = [p for p in read_speedscope(out) if int(p.name.split()[1]) != parent]
    weights = [(s, w) for p in profiles for s, w in p.stacks.items()]
    return sum(w for s, w in weights if "daemon_work" in s), sum(w for _s, w in weights)


def test_a_daemon_is_followed_after_its_parents_exit(tmp_path):
    """A child whose parent exits at once (a daemon's double fork) is gone from every look at the parent's
    children before the first one: it is seized at its parent's exit stop instead (PTRACE_O_TRACEEXIT), as
    is the daemon at its own parent's (or, that one gone already, through the session it led), and the
    recording goes on while it runs, though the command nprof started has exited."""
    out = str(tmp_path / "daemon.speedscope.json")
    pidfile, stopfile = str(tmp_path / "pid"), str(tmp_path / "stop")
    cmd = ["--", sys.executable, "-c", _DAEMONIZES, pidfile, stopfile, "1"]
    result = run_nprof("record", "--subprocesses", "-o", out, *cmd)
    assert result.returncode == 0, result.stderr
    assert "target exited (status 0)" in result.stderr, result.stderr
    meta = Session.load(str(tmp_path / "daemon.nprof")).meta
    with open(pidfile) as f:
        daemon = int(f.read())
    assert daemon in meta.processes and meta.exit_status.get(daemon) == 0, (daemon, meta.processes)
    in_work, total = _daemon_seconds(out, meta.pid)
    assert in_work >= 0.5 and in_work >= 0.9 * total, (in_work, total)  # of the 1 s it works


def test_a_daemon_runs_on_free_when_the_recording_ends_first(tmp_path):
    """Recorded for less than the daemon lives: it is detached at the end, running, not stopped."""
    out = str(tmp_path / "daemon.speedscope.json")
    pidfile, stopfile = str(tmp_path / "pid"), str(tmp_path / "stop")
    cmd = ["--", sys.executable, "-c", _DAEMONIZES, pidfile, stopfile, "60"]
    try:
        result = run_nprof("record", "--subprocesses", "-d", "1", "-o", out, *cmd)
        assert result.returncode == 0, result.stderr
        assert wait_until(lambda: os.path.exists(pidfile))
        with open(pidfile) as f:
            daemon = int(f.read())
        assert_running_free(daemon)
        in_work, _total = _daemon_seconds(out, Session.load(str(tmp_path / "daemon.nprof")).meta.pid)
        assert in_work >= 0.3, in_work  # of the 1 s recorded
    finally:
        open(stopfile, "w").close()
    assert wait_until(lambda: not os.path.exists(f"/proc/{daemon}"), 10), "the daemon did not finish its work"


#: a parent that traces its child, as a debugger does: the child asks for it (PTRACE_TRACEME) at once, and
#: lives 0.6 s; its exit code says whether the request was granted (0) or not (3)
_TRACES_ITS_CHILD = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
child = os.fork()
if child == 0:
    granted = libc.ptrace(0, 0, None, None) == 0  # PTRACE_TRACEME
    time.sleep(0.6)
    os._exit(0 if granted else 3)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_child_another_tracer_has_is_told_of_once_with_its_tracer(tmp_path):
    """A look for children every 100 ms found a child traced by its own parent again and again: the notice
    that it is not followed came at each look, and without its reason, which names the tracer."""
    out = str(tmp_path / "traced.folded")
    result = run_nprof("record", "--subprocesses", "-o", out, "--", sys.executable, "-c", _TRACES_ITS_CHILD)
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if "not following child" in line]
    if result.stdout.strip() == "0":  # (else nprof attached it first, in the microseconds before its request)
        assert len(notices) == 1, notices
        assert "already being traced by pid" in notices[0], notices
    else:
        assert not notices, notices


#: runs nprof on a short command three times, and fails (with its error) if one of those recordings does
_RUNS_NPROF = """
import subprocess, sys
for _ in range(3):
    run = subprocess.run([sys.executable, "-m", "profiler", "record", "-d", "0.2", "-o", sys.argv[1], "--",
                          "sleep", "0.3"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(run.stderr)
"""


def test_the_command_nprof_starts_stays_its_own_under_a_tracer_following_children(tmp_path):
    """nprof seizes the command it starts at its fork, not 40-50 ms later once its sampler is built: a
    tracer following children (another nprof, with --subprocesses) took the child in between, and the
    recording failed with "already being traced" (in 2 of 3 of nprof's daemon tests recorded so)."""
    out, inner = str(tmp_path / "outer.folded"), str(tmp_path / "inner.folded")
    result = run_nprof("record", "--subprocesses", "-o", out, "--", sys.executable, "-c", _RUNS_NPROF, inner)
    assert result.returncode == 0, result.stderr


#: a Python parent whose forked child waits at a FIFO (argv[1]) and then execs Python again (the same
#: executable, as multiprocessing's spawn does) into ``exec_work``; the parent waits for it
_FORKS_THEN_EXECS = """
import os, sys
pid = os.fork()
if pid == 0:
    with open(sys.argv[1], "rb") as fifo:
        fifo.read(1)
    code = "import time\\ndef exec_work():\\n    end = time.monotonic() + 1.5\\n"
    code += "    while time.monotonic() < end:\\n        pass\\nexec_work()\\n"
    os.execv(sys.executable, [sys.executable, "-c", code])
os.waitpid(pid, 0)
"""

#: nprof whose first look at a child lets it exec while nprof reads it, before the seize: the race of a
#: fork child found just before its exec, made certain
EXEC_WHILE_READ = """
import os, sys, time
from profiler.cli.main import main
from profiler.sampling import processes
from profiler.sampling.children import program_identity

fifo = sys.argv.pop(1)
make_target = processes.SampledProcesses._make_target
done = []

def exec_while_read(self, process, fresh=False):
    target = make_target(self, process, fresh)
    if process.pid != self.session.meta.pid and not done:
        done.append(process.pid)
        before = program_identity(process.pid)
        with open(fifo, "wb") as f:
            f.write(b"x")
        end = time.monotonic() + 10
        while program_identity(process.pid) == before and time.monotonic() < end:
            time.sleep(0.001)
    return target

processes.SampledProcesses._make_target = exec_while_read
sys.exit(main(sys.argv[1:]))
"""


def test_a_child_that_execs_while_it_is_attached_is_mapped_again(tmp_path):
    """A fork child that execs while nprof reads it, before the seize, gets no exec stop: it kept its
    parent's program, label and runtime, and showed no Python frames of its own (1-6 times per run of a
    fork+exec stress test, 1 of ~20 multiprocessing spawn runs on 3.8). Told by its executable and the
    start of its stack, which a new image moves even where the same program is run again."""
    fifo = str(tmp_path / "exec-now")
    os.mkfifo(fifo)
    out = str(tmp_path / "family.speedscope.json")
    result = run_nprof_with(EXEC_WHILE_READ, tmp_path, fifo, "record", "--subprocesses", "-r", "200", "-o", out,
                            "--", sys.executable, "-c", _FORKS_THEN_EXECS, fifo)  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    [child] = [p for p in read_speedscope(out) if "-c import time" in p.name]  # (the label of its new program)
    working = sum(w for s, w in child.stacks.items() if "exec_work" in s)
    assert working >= 0.8 * sum(child.stacks.values()), f"{child.name}: {child.stacks.most_common(3)}"
