"""Faults while recording: the target always runs on (or exits normally), is never left stopped or traced,
and whatever output is due is valid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from profiler.model import StopReason
from profiler.profile.session import Session
from profiler.target.procfs import read_text, split_stat, tracer_process
from tests.support.profiles import read_speedscope, share
from tests.support.targets import (
    assert_running_free,
    nprof_command,
    process_state,
    run_nprof,
    run_nprof_with,
    running_target,
    stop,
    thread_states,
    wait_until,
)


def run_time(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def user_time(pid: int) -> int:
    """Clock ticks the process spent in user mode (proc(5) field 14): what its own code ran, unlike the run
    time, which also counts the kernel's work for nprof's stops."""
    return int(split_stat(read_text(f"/proc/{pid}/stat") or "")[14])


def attached_by(pid: int, tracer: int) -> bool:
    """Every thread of ``pid`` is traced by process ``tracer`` (0: by none)."""
    states = thread_states(pid)
    return bool(states) and all(tracer_process(t) == tracer for _s, t in states.values())


def start_recording(pid: int, out: str, *extra: str) -> subprocess.Popen:
    nprof = subprocess.Popen(
        nprof_command("record", "--pid", str(pid), "-o", out, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert wait_until(lambda: attached_by(pid, nprof.pid) or nprof.poll() is not None, timeout=30)
    assert nprof.poll() is None, nprof.communicate()
    return nprof


def test_thread_churn(churn_fp, tmp_path):
    out = str(tmp_path / "churn.speedscope.json")
    with running_target([churn_fp]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "2", "-r", "200", "-o", out)
        assert result.returncode == 0, result.stderr
        assert target.poll() is None, "the target must run on"
        assert_running_free(target.pid)
        main_thread = f"(tid {target.pid})"
    profiles = read_speedscope(out)
    workers = [p for p in profiles if any("churn_work" in s for st in p.stacks for s in st)]
    assert len(workers) >= 2, "short-lived threads are sampled from their start"
    # the target's CPU time is its workers': found within 10 ms of their start (sampler.SYNC_INTERVAL),
    # and stopped in the tick that found them, they are sampled for most of their life. (Seizing them as
    # they are created, PTRACE_O_TRACECLONE, was tried: each pthread_create then waited for nprof to answer
    # its clone stop, 53 -> 1134 us, and the creator's inflated time in clone3 took a third of the samples.)
    # A worker is counted by its thread, not by churn_work: on a loaded machine a new thread waits for its
    # first CPU at clone3's return, a busy (runnable) sample of it without churn_work: 21% of the running
    # samples at a load of 2-3 on 2 CPUs, which left 59-66% in churn_work, against 79-91% by thread.
    working, total = 0.0, 0.0
    for p in profiles:
        weight = sum(p.stacks.values())
        total += weight
        working += 0.0 if p.name.endswith(main_thread) else weight
    assert working / total >= 0.75, f"{working / total:.0%} of the running samples in the workers"
    # 2-3 workers live at any time: 1.27-1.35 worker samples a tick; 0.39-0.49 when the threads found were
    # first stopped a tick later
    ticks = Session.load(str(tmp_path / "churn.nprof")).counters["ticks"]
    samples = round(working * 200)  # speedscope weights are seconds: 1/200 s a sample at 200 Hz
    assert samples >= 0.8 * ticks, f"{samples} worker samples in {ticks} ticks"


def test_target_exits_mid_recording(churn_fp, tmp_path):
    out = str(tmp_path / "exit.speedscope.json")
    # the target churns threads for 1.5 s of the 30 s recording, then exits normally
    with running_target([churn_fp, "1.5"]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "30", "-o", out)
        assert result.returncode == 0, result.stderr
        assert "target exited" in result.stderr
        assert target.wait(timeout=10) == 0, "the target exits normally"
    assert read_speedscope(out), "the profile of what ran is written"
    assert os.path.exists(tmp_path / "exit.nprof")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_nprof_writes_what_was_sampled(chain_fp, tmp_path, sig):
    out = str(tmp_path / "stopped.speedscope.json")
    with running_target([chain_fp]) as target:
        nprof = start_recording(target.pid, out)
        time.sleep(1.0)  # the length of the recording, not a synchronisation
        nprof.send_signal(sig)
        _stdout, stderr = nprof.communicate(timeout=60)
        assert nprof.returncode == 0, stderr
        assert f"stopped by {signal.Signals(sig).name}" in stderr
        assert target.poll() is None
        assert_running_free(target.pid)
        before = run_time(target.pid)
        assert wait_until(lambda: run_time(target.pid) > before + 1_000_000), "the target keeps running"
    [profile] = read_speedscope(out)
    assert sum(profile.stacks.values()) > 0


@pytest.mark.parametrize("end", ["duration", "SIGINT"])
def test_the_end_of_a_recording_leaves_sleeping_threads_asleep(sleepers_fp, tmp_path, end):
    """A detach that stops each thread first woke the sleeping ones: ``epoll_wait`` returned EINTR, and a
    ``clock_nanosleep`` restarted through restart_syscall, which the target's seccomp filter kills it for
    (tests/targets/sleepers.c: status 3 or -31). The tracing thread's exit detaches without a stop."""
    out = str(tmp_path / "sleepers.speedscope.json")
    with running_target([sleepers_fp]) as target:
        if end == "duration":
            result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", out)
            returncode, stderr = result.returncode, result.stderr
        else:
            nprof = start_recording(target.pid, out)
            time.sleep(1.0)  # the length of the recording, not a synchronisation
            nprof.send_signal(signal.SIGINT)
            _stdout, stderr = nprof.communicate(timeout=60)
            returncode = nprof.returncode
        assert returncode == 0, stderr
        assert target.poll() is None, f"the target ended with status {target.returncode}"
        assert_running_free(target.pid)
    [spinner] = [p for p in read_speedscope(out) if p.stacks]
    hit, total = share(spinner.stacks, lambda s: s[-3:-1] == ("main_loop", "work") or s[-2:] == ("main_loop", "work"))
    assert total > 0 and hit >= 0.9 * total, spinner.stacks.most_common(5)


#: nprof, signalled by itself while it builds its sampler, through ``exec`` of source text as a dataclass
#: defined by a lazy import is (the agents' import, 0.2 s after launch here); argv[1] names the signal
SIGNALLED_WHILE_STARTING = """
import os, signal, sys
from profiler.cli import main as cli

agents, name = cli.default_agents, sys.argv.pop(1)

def signalled(objects):
    exec(f"os.kill(os.getpid(), signal.{name})")
    return agents(objects)

cli.default_agents = signalled
from profiler.entry import main
sys.exit(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_nprof_starts_the_command_ends_it_before_it_runs(tmp_path, sig):
    """A signal in the set-up ends it at its next step: the command never runs, nothing is written, and nprof
    exits as a shell reports the signal. Before, SIGINT raised KeyboardInterrupt where the set-up was: in
    an ``exec``, CPython then ended nprof by SIGINT (-2) after it had printed its message (1-5 of 60
    SIGINTs 0.20-0.30 s after launch), and in an at-fork callback the Ctrl-C was dropped and the whole
    command recorded; SIGTERM killed nprof outright."""
    ran, out = tmp_path / "ran", tmp_path / "p.folded"
    result = run_nprof_with(SIGNALLED_WHILE_STARTING, tmp_path, signal.Signals(sig).name, "record", "-o", str(out),
                            "--", "touch", str(ran))  # fmt: skip
    assert result.returncode == 128 + sig, result.stderr
    name = signal.Signals(sig).name
    assert f"interrupted by {name} while starting; nothing was recorded" in result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    assert not ran.exists() and not out.exists()


#: nprof that signals itself (SIGINT or SIGTERM, its first argument) the moment its attach is done
SIGNALLED_ONCE_ATTACHED = """
import os, signal, sys
from profiler.sampling import sampler as sampling

name, add_process = sys.argv.pop(1), sampling.Sampler.add_process

def signalled(self, *args, **kwargs):
    added = add_process(self, *args, **kwargs)
    os.kill(os.getpid(), getattr(signal, name))
    return added

sampling.Sampler.add_process = signalled
from profiler.entry import main
sys.exit(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_attached_writes_what_was_sampled(chain_fp, tmp_path, sig):
    """From the attach on, a signal ends the recording and what was sampled is written, however little:
    before, a signal between the attach and the first tick said "nothing was recorded" and wrote nothing.
    The target runs on, untraced."""
    out = tmp_path / "p.speedscope.json"
    with running_target([chain_fp]) as target:
        result = run_nprof_with(SIGNALLED_ONCE_ATTACHED, tmp_path, signal.Signals(sig).name, "record", "--pid",
                                str(target.pid), "-o", str(out))  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"stopped by {signal.Signals(sig).name}" in result.stderr, result.stderr
        assert "nothing was recorded" not in result.stderr and "Traceback" not in result.stderr
        assert out.exists() and (tmp_path / "p.nprof").exists()
        assert_running_free(target.pid)


#: nprof that sends SIGINT to the command it forked, alone, while the command waits to be let exec
CHILD_SIGNALLED_BEFORE_ITS_EXEC = """
import os, signal, sys
from profiler.cli import main as cli

agents = cli.default_agents

def signal_the_child(objects):
    [child] = open(f"/proc/self/task/{os.getpid()}/children").read().split()
    os.kill(int(child), signal.SIGINT)
    return agents(objects)

cli.default_agents = signal_the_child
from profiler.entry import main
sys.exit(main())
"""


def test_a_command_signalled_before_its_exec_dies_of_it_as_it_would_unprofiled(tmp_path):
    """The forked child waits in nprof's Python until it may exec; a SIGINT that reaches it there takes the
    default action, as it would in the command. Before, the child ran its copy of nprof's handler and
    exited 127 ("exited (127) before it started")."""
    ran = tmp_path / "ran"
    result = run_nprof_with(CHILD_SIGNALLED_BEFORE_ITS_EXEC, tmp_path, "record", "-o", str(tmp_path / "p.folded"),
                            "--", "touch", str(ran))  # fmt: skip
    assert result.returncode != 0 and "touch was killed by signal 2 before it started" in result.stderr, result.stderr
    assert not ran.exists()


#: nprof with a bug put in: its 300th sample raises, from where every sample's work after the resume runs
WITH_A_BUG = """
import sys
from profiler.entry import main
from profiler.sampling.sampler import Sampler

record, calls = Sampler.record, [0]

def failing(self, capture):
    calls[0] += 1
    if calls[0] == 300:
        raise RuntimeError("a bug put in by the test")
    return record(self, capture)

Sampler.record = failing
sys.exit(main())
"""


def test_an_internal_error_still_writes_what_was_sampled(chain_fp, tmp_path):
    """A bug that raises mid-recording (a 3.13 chain of shims alone did once, in the merge): the samples
    taken before it are written, the target is let go, and nprof exits with its internal-error status.
    Before, the recording was lost."""
    out = str(tmp_path / "bug.speedscope.json")
    with running_target([chain_fp]) as target:
        result = subprocess.run([sys.executable, "-c", WITH_A_BUG, "record", "--pid", str(target.pid), "-r", "500",
                                 "-o", out], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 70, result.stderr
        assert "a bug put in by the test" in result.stderr and "internal error" in result.stderr
        assert "stopped by an internal error" in result.stderr, result.stderr
        assert target.poll() is None
        assert wait_until(lambda: attached_by(target.pid, 0), timeout=10)
        assert_running_free(target.pid)
    [profile] = read_speedscope(out)
    assert profile.stacks
    # the 299 samples recorded before the bug; a thread that had not run since its last one is counted again
    # without a stop, and without Sampler.record (REUSED: one in a CI run under load)
    session = Session.load(str(tmp_path / "bug.nprof"))
    recorded = sum(n for (_t, _s, stop, _c), n in session.samples.items() if stop != StopReason.REUSED)
    assert recorded == 299


def test_a_signal_that_comes_again_still_writes_what_was_sampled(chain_fp, tmp_path):
    """Twice (a terminal's Ctrl-C reaches the whole process group, `timeout` signals its child and then the
    group, an impatient user presses it again): what was sampled is still written. Before, the second
    raised a KeyboardInterrupt wherever nprof was, and nothing was written. (A third abandons it: the unit
    test of StopFlag.)"""
    out = str(tmp_path / "twice.speedscope.json")
    with running_target([chain_fp]) as target:
        nprof = start_recording(target.pid, out)
        time.sleep(0.5)  # the length of the recording, not a synchronisation
        nprof.send_signal(signal.SIGINT)
        time.sleep(0.05)  # two signals, not one: a signal still pending is not queued again
        nprof.send_signal(signal.SIGINT)
        _stdout, stderr = nprof.communicate(timeout=60)
        assert nprof.returncode == 0, stderr
        assert "stopped by SIGINT" in stderr
        assert target.poll() is None
        assert wait_until(lambda: attached_by(target.pid, 0), timeout=10)
        assert_running_free(target.pid)
    [profile] = read_speedscope(out)
    assert sum(profile.stacks.values()) > 0


def test_a_signal_after_the_profile_is_written_does_not_change_the_exit(chain_fp, tmp_path):
    """The second signal of a pair may come once everything is written, as nprof exits: under Python's own
    handler it raised KeyboardInterrupt in the interpreter's shutdown, and the process died by SIGINT
    (status -2) in 16 of 20 recordings signalled twice 0.1 s apart."""
    out = str(tmp_path / "late.speedscope.json")
    with running_target([chain_fp]) as target:
        nprof = start_recording(target.pid, out)
        time.sleep(0.5)  # the length of the recording, not a synchronisation
        nprof.send_signal(signal.SIGINT)
        assert nprof.stderr is not None
        lines = []
        for line in nprof.stderr:  # up to the last line nprof prints: the top table's header
            lines.append(line)
            if "Top functions" in line:
                break
        nprof.send_signal(signal.SIGINT)
        rest = nprof.communicate(timeout=60)[1]
        assert nprof.returncode == 0, "".join(lines) + rest
    [profile] = read_speedscope(out)
    assert sum(profile.stacks.values()) > 0


def test_sigkill_to_nprof_leaves_target_running(chain_fp, tmp_path):
    with running_target([chain_fp]) as target:
        nprof = start_recording(target.pid, str(tmp_path / "killed.speedscope.json"))
        time.sleep(0.5)
        nprof.kill()
        nprof.communicate(timeout=30)
        # no PTRACE_O_EXITKILL: the kernel detaches every thread when the tracer dies
        assert wait_until(lambda: attached_by(target.pid, 0), timeout=10)
        assert target.poll() is None
        assert_running_free(target.pid)
        before = run_time(target.pid)
        assert wait_until(lambda: run_time(target.pid) > before + 1_000_000), "the target keeps running"


def test_signals_to_the_target_are_forwarded(signals_fp, tmp_path):
    """The target takes a SIGALRM every millisecond while nprof samples it; its handler must see them."""
    r, w = os.pipe()
    target = subprocess.Popen([signals_fp, str(w)], pass_fds=[w], stdout=subprocess.PIPE, text=True)
    os.close(w)
    try:
        assert os.read(r, 6) == b"ready\n"
        out = str(tmp_path / "signals.speedscope.json")
        result = run_nprof("record", "--pid", str(target.pid), "-d", "2", "-r", "500", "-o", out)
        assert result.returncode == 0, result.stderr
        assert_running_free(target.pid)
        target.send_signal(signal.SIGUSR1)
        report, _ = target.communicate(timeout=30)
    finally:
        os.close(r)
        stop(target)
    alarms, periods = (int(float(x)) for x in report.split()[1::2])
    # Standard signals coalesce while one is pending, so a busy 2-CPU machine loses a few even untraced;
    # a tracer that swallowed or stalled signals would lose most of them.
    assert alarms >= 0.5 * periods, report
    # A sample is taken where a signal arrived whenever the thread had not run its handler yet: at the
    # signal's delivery-stop (passing it on and stopping the thread again stopped it at the handler's first
    # instruction, every time: a handler that counts, a few nanoseconds per millisecond, had 3-20% of the
    # samples), and at a stop that came as the kernel built the handler's frame, after nprof passed the
    # signal on between ticks (0.1-1.1% of the samples, 8 runs, unwind/sigframe.py)
    [profile] = read_speedscope(out)
    in_handler, total = share(profile.stacks, lambda s: "on_alarm" in s)
    assert total > 0 and in_handler / total <= 0.01, f"{in_handler}/{total} of the samples in on_alarm"


#: a second tracer, as ``strace -p TID`` is: seizes one thread (no stop), says so, holds it until stdin ends
OTHER_TRACER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
assert libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0, ctypes.get_errno()  # PTRACE_SEIZE
print("seized", flush=True)
sys.stdin.read()
"""


def test_a_thread_another_tracer_holds_is_named_not_silently_left_out(threads_fp, tmp_path):
    """One thread of the target is traced by another tracer: nprof records the others and says which one
    it could not trace and who holds it (it was left out without a word, and tried again every 10 ms)."""
    out = str(tmp_path / "others.speedscope.json")
    with running_target([threads_fp]) as target:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{target.pid}/task"))
        held = tids[-1]
        other = subprocess.Popen([sys.executable, "-c", OTHER_TRACER, str(held)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert other.stdout.readline() == "seized\n"
            result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", out)
        finally:
            other.stdin.close()
            other.wait(timeout=30)
        assert result.returncode == 0, result.stderr
        assert_running_free(target.pid)
    assert f"1 thread(s) could not be traced, so they have no samples: {held} (traced by pid {other.pid}" in (
        result.stderr), result.stderr
    names = [p.name for p in read_speedscope(out)]
    assert len(names) >= 2 and not [n for n in names if f"tid {held})" in n], names  # the others are recorded
    counters = Session.load(str(tmp_path / "others.nprof")).counters
    assert counters["threads_not_traced"] == 1 and "threads_exited" not in counters, "none exited: detached"


def test_job_control_stop_is_kept(chain_fp, tmp_path):
    """A target stopped with SIGSTOP while traced stays stopped after nprof detaches, and resumes on SIGCONT."""
    out = str(tmp_path / "stopped.speedscope.json")
    with running_target([chain_fp]) as target:
        nprof = start_recording(target.pid, out, "-d", "3")
        time.sleep(0.5)
        os.kill(target.pid, signal.SIGSTOP)
        stdout, stderr = nprof.communicate(timeout=60)
        assert nprof.returncode == 0, stderr
        assert wait_until(lambda: attached_by(target.pid, 0))
        state = process_state(target.pid)
        assert state is not None and state[0] == "T", f"the job-control stop was lost: {state}"
        os.kill(target.pid, signal.SIGCONT)
        assert wait_until(lambda: process_state(target.pid)[0] in ("R", "S"))
        assert_running_free(target.pid)


def test_a_target_stopped_before_the_attach_stays_stopped(chain_fp, tmp_path):
    """A process already stopped by job control is recorded without running a single instruction: nprof
    says so, counts its threads as idle (shown with --idle), and leaves it stopped; SIGCONT resumes it."""
    out = str(tmp_path / "stopped.speedscope.json")
    with running_target([chain_fp]) as target:
        os.kill(target.pid, signal.SIGSTOP)
        assert wait_until(lambda: process_state(target.pid)[0] == "T")
        before = user_time(target.pid)
        result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "--idle", "-o", out)
        assert result.returncode == 0, result.stderr
        assert f"pid {target.pid} (chain-fp) is stopped" in result.stderr
        assert user_time(target.pid) == before, "the stopped target ran while recorded"
        assert wait_until(lambda: attached_by(target.pid, 0))
        assert process_state(target.pid)[0] == "T", "the job-control stop was lost"
        [profile] = read_speedscope(out)
        # with --idle, the thread shows where it stopped (anywhere from its "ready" write on), and only there
        [stack] = profile.stacks
        assert stack[:4] == ("_start", "__libc_start_main_impl", "__libc_start_call_main", "main"), stack
        dump = run_nprof("dump", "--pid", str(target.pid))
        assert dump.returncode == 0, dump.stderr
        assert "[stopped]" in dump.stdout, dump.stdout
        os.kill(target.pid, signal.SIGCONT)
        assert wait_until(lambda: process_state(target.pid)[0] in ("R", "S"))
        assert_running_free(target.pid)
