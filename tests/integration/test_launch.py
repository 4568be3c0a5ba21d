"""A command started by nprof (``nprof record -- CMD``) is held at its exec and sampled from its first
instruction, through every exec it makes (``profiler/target/launch.py``)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys

import pytest

from tests.support.profiles import read_speedscope
from tests.support.targets import FRAME_POINTERS, build_c, nprof_command, run_nprof

PHASE_MS = 200  #: startup.c spins this long in its constructor, then as long in main


def record_startup(command: list[str], tmp_path) -> tuple[str, float, float, list[tuple[str, ...]]]:
    """Run startup.c under nprof at 1 kHz: (what it wrote about being traced at its start, seconds sampled
    in its constructor's ``startup``, seconds sampled in main's ``steady``, the stacks)."""
    out = str(tmp_path / "startup.speedscope.json")
    result = run_nprof("record", "-r", "1000", "-o", out, "--", *command)
    assert result.returncode == 0, result.stderr
    assert "target exited (status 0)" in result.stderr
    # told even though it exited before nprof gave up looking for a runtime (it is C, not Python)
    # (the reason depends on how far detection got before the exec: no interpreter mapped at all, or an
    # executable that exports no _PyRuntime; a clean-clone run gave the first, other runs the second)
    assert re.search(r"not a CPython (3\.8\+ interpreter|process)[^;\n]*; profiling native frames", result.stderr), (
        result.stderr)
    [profile] = read_speedscope(out)
    startup = sum(w for s, w in profile.stacks.items() if "startup" in s)
    steady = sum(w for s, w in profile.stacks.items() if "steady" in s and "main" in s)
    return (tmp_path / "traced").read_text(), startup, steady, list(profile.stacks)


def test_a_command_is_sampled_from_its_first_instruction(startup_nofp, tmp_path):
    """Its constructor runs before main and finds itself traced; it is sampled about as fully as main.

    Started with ``subprocess`` and attached after, the program ran free for the tens of milliseconds that
    reading its maps and opening its ELF files take: the constructor saw no tracer, and its 150 ms got
    21-39% of main's samples here (0.6-0.9 with the exec held; ~1 with no slow first ticks)."""
    traced, startup, steady, stacks = record_startup([startup_nofp, str(PHASE_MS), str(tmp_path / "traced")], tmp_path)
    assert traced == "1\n", "the program ran before nprof had seized it"
    assert steady > PHASE_MS / 3000, f"only {steady:.3f} s sampled of a {PHASE_MS} ms phase"
    assert startup >= 0.6 * steady, f"{startup:.3f} s sampled in the constructor against {steady:.3f} s in main"
    # the constructor's samples are whole stacks from _start, through ld.so's or libc's init code
    assert all(s[0] == "_start" for s in stacks if "startup" in s)


def test_an_exec_is_mapped_before_the_new_program_runs(startup_nofp, tmp_path):
    """A wrapper that execs the program (pyenv shims, `sh -c 'exec ...'`): the new program waits in its
    exec stop while nprof maps it. Found by the scan every 100 ms instead, its first samples were unwound
    with the shell's modules."""
    script = 'exec "$0" "$@"'
    command = ["sh", "-c", script, startup_nofp, str(PHASE_MS), str(tmp_path / "traced")]
    traced, startup, steady, stacks = record_startup(command, tmp_path)
    assert traced == "1\n"
    assert startup >= 0.6 * steady, f"{startup:.3f} s sampled in the constructor against {steady:.3f} s in main"
    named = [s for s in stacks if "startup" in s]
    assert named and all(s[0] == "_start" and not any(f.startswith("0x") for f in s) for s in named)


def test_the_command_gets_the_signal_state_a_shell_would_give(tmp_path):
    """Python ignores SIGPIPE and SIGXFSZ; a command nprof starts gets their default actions back, as
    ``subprocess`` gives them, and does not inherit the SIGCHLD block nprof waits with."""
    # grep reads its own status, exec'd in the shell's place: the shell's own mask, read while it forks
    # the grep, may have every signal blocked for the moment (dash does so around fork), and once did
    probe = "exec grep -E '^Sig(Ign|Blk)' /proc/self/status > \"$0\""
    got = tmp_path / "got"
    result = run_nprof("record", "-o", str(tmp_path / "p.folded"), "--", "sh", "-c", probe, str(got))
    assert result.returncode == 0, result.stderr
    masks = dict(line.split(":") for line in got.read_text().splitlines())
    ignored, blocked = int(masks["SigIgn"], 16), int(masks["SigBlk"], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), f"{sig.name} is ignored in the command"
    assert not blocked & (1 << (signal.SIGCHLD - 1))


def test_a_command_keeps_the_stop_signals_nprof_was_started_with_ignored(tmp_path):
    """A script's background job starts with SIGINT ignored (POSIX, without job control): the command nprof
    starts then keeps it ignored, as it would run alone, though nprof's own handler answers it (and SIGTERM,
    which nprof was not started with ignored, takes its default action in the command)."""
    probe = "exec grep -E '^SigIgn' /proc/self/status > \"$0\""
    got = tmp_path / "got"
    result = subprocess.run(nprof_command("record", "-o", str(tmp_path / "p.folded"), "--", "sh", "-c", probe,
                                          str(got)),
                            capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    assert result.returncode == 0, result.stderr
    ignored = int(got.read_text().split(":")[1], 16)
    assert ignored & (1 << (signal.SIGINT - 1)), "SIGINT is not ignored in the command"
    assert not ignored & (1 << (signal.SIGTERM - 1)), "SIGTERM is ignored in the command"


def _may_raise_nice() -> bool:
    """Whether a process started here may take nice -20 (CAP_SYS_NICE, or RLIMIT_NICE 40)."""
    probe = [sys.executable, "-c", "import os; os.setpriority(os.PRIO_PROCESS, 0, -20)"]
    return subprocess.run(probe, capture_output=True).returncode == 0


#: writes to "$0" the command's nice value and that of its tracer (nprof's tracing thread), both read while
#: it is traced (field 19 of /proc/PID/stat; neither name has a space)
NICE_PROBE = (
    "t=$(awk '/^TracerPid/{print $2}' /proc/$$/status); "
    "echo $(cut -d' ' -f19 /proc/$$/stat) $(cut -d' ' -f19 /proc/$t/stat) > \"$0\""
)


@pytest.mark.parametrize("priority", ["auto", "normal"])
def test_nprof_raises_its_own_nice_not_the_commands(priority, tmp_path):
    """nprof takes the highest fair-class priority it may, so that a target's busy threads do not starve
    its work (``sampling/niceness.py``); the command it starts runs at the nice nprof was started at, and
    ``--priority normal`` leaves nprof's own as it was."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    got = tmp_path / "got"
    result = run_nprof("record", "--priority", priority, "-o", str(tmp_path / "p.folded"), "--",
                       "sh", "-c", NICE_PROBE, str(got))  # fmt: skip
    assert result.returncode == 0, result.stderr
    command_nice, tracer_nice = map(int, got.read_text().split())
    assert command_nice == own
    raised = priority == "auto" and own == 0 and _may_raise_nice()
    assert tracer_nice == (-20 if raised else own)


@pytest.mark.parametrize(
    "content, mode, phrase",
    [
        ("echo no interpreter line\n", 0o755, "Cannot run {path}: Exec format error"),
        ("#!/bin/sh\necho hi\n", 0o644, "Command not executable: {path}"),
    ],
)
def test_a_file_that_cannot_run(content, mode, phrase, tmp_path):
    """The exec's own error, reported before anything is recorded (exit code 2, no output file)."""
    path = tmp_path / "cmd"
    path.write_text(content)
    path.chmod(mode)
    out = tmp_path / "x.folded"
    result = run_nprof("record", "-o", str(out), "--", str(path))
    assert result.returncode == 2, result.stderr
    assert phrase.format(path=path) in result.stderr
    assert "Traceback (most recent call last)" not in result.stderr
    assert not out.exists()


def test_a_set_user_id_program_without_the_capability_to_trace_it(tmp_path):
    """Traced, a set-user-ID program execs without its privileges (execve(2)); without CAP_SYS_PTRACE nprof
    says so instead of running it crippled."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to make a set-user-ID file) and setpriv (to drop CAP_SYS_PTRACE)")
    program = tmp_path / "suid-true"
    shutil.copy("/bin/true", program)
    os.chown(program, 65534, 65534)
    program.chmod(0o755 | stat.S_ISUID)
    no_ptrace = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    result = subprocess.run(
        no_ptrace + nprof_command("record", "-o", str(tmp_path / "x.folded"), "--", str(program)),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "set-user-ID program" in result.stderr and "CAP_SYS_PTRACE" in result.stderr


@pytest.mark.parametrize(
    "script, code",
    [("exit 7", 7), ("kill -TERM $$", 128 + signal.SIGTERM)],
    ids=["exit-status", "killed"],
)
def test_nprof_exits_with_the_command_s_status(script, code, tmp_path):
    """``nprof record -- CMD`` ends as CMD ended, as strace and time(1) do (py-spy exits 0 whatever the
    command did), so it can stand in for CMD in a CI job: its exit code, or 128 + a killing signal."""
    out = str(tmp_path / "x.folded")
    result = run_nprof("record", "-o", out, "--", "sh", "-c", script)
    assert result.returncode == code, result.stderr
    assert os.path.exists(out), "the profile is written all the same"


#: a command that exits 7 on Ctrl-C, after a line once its handler is in place
EXITS_7_ON_CTRL_C = (
    "import sys, time\n"
    "print('ready', flush=True)\n"
    "try:\n"
    "    time.sleep(60)\n"
    "except KeyboardInterrupt:\n"
    "    sys.exit(7)\n"
)


@pytest.mark.parametrize("group", [True, False])
def test_a_ctrl_c_that_ends_the_command_nprof_waits_for_gives_its_status(tmp_path, group):
    """A terminal's Ctrl-C reaches nprof and its command together, while nprof waits for the command after
    the recording: nprof said "runs on" of a command that had exited of it, and exited 130 for it. A
    SIGINT to nprof alone still leaves the command running, and says so."""
    nprof = subprocess.Popen(nprof_command("record", "-d", "0.2", "-o", str(tmp_path / "x.folded"), "--",
                                           sys.executable, "-c", EXITS_7_ON_CTRL_C),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)  # fmt: skip
    try:
        assert nprof.stdout.readline() == "ready\n"
        lines = []
        for line in nprof.stderr:
            lines.append(line)
            if "waiting for" in line:
                break
        if group:
            os.killpg(nprof.pid, signal.SIGINT)
            assert nprof.wait(timeout=60) == 7, "".join(lines) + nprof.stderr.read()
            assert "runs on" not in nprof.stderr.read()
        else:
            nprof.send_signal(signal.SIGINT)
            assert nprof.wait(timeout=60) == 130
            os.killpg(nprof.pid, signal.SIGKILL)  # the command, which ran on: it holds nprof's stderr open
            assert "runs on" in nprof.stderr.read()
    finally:
        if nprof.poll() is None:
            os.killpg(nprof.pid, signal.SIGKILL)
            nprof.wait()


def test_a_command_that_outlives_the_recording_is_waited_for_and_its_status_given(tmp_path):
    """Recording for less time than the command runs: nprof waits for it (never kills it), then exits with
    its status. The command reads nprof's standard input, and ends when the test closes it."""
    out = str(tmp_path / "x.folded")
    nprof = subprocess.Popen(nprof_command("record", "-d", "0.2", "-o", out, "--", "sh", "-c", "read x; exit 5"),
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lines = []
        for line in nprof.stderr:
            lines.append(line)
            if "waiting for sh" in line:
                break
        assert any("waiting for sh" in line for line in lines), "".join(lines)
        nprof.stdin.close()
        assert nprof.wait(timeout=60) == 5, "".join(lines) + nprof.stderr.read()
    finally:
        if nprof.poll() is None:
            nprof.kill()
            nprof.wait()


def test_a_thread_let_go_from_its_exec_stop_is_not_sampled_before_it_runs(tmp_path):
    """After each exec, the next tick took the exec's own run time for running, stopped the thread at once
    and counted a sample at ld.so's entry point, where it had not run yet: 9% of the samples of a program
    that execs itself every 3 ms (29% at 100 Hz with --subprocesses in a sweep). Such one-frame samples
    are left now: the thread counts as not having run until it has."""
    binary = build_c("execself.c", str(tmp_path), FRAME_POINTERS, name="execself")
    out = str(tmp_path / "execs.folded")
    result = run_nprof("record", "-r", "1000", "-o", out, "--", binary, "100", "3")
    assert result.returncode == 0, result.stderr
    total = entry = 0
    with open(out) as f:
        for line in f:
            stack, n = line.rsplit(" ", 1)
            total += int(n)
            entry += int(n) if ";" not in stack and "ld-linux" in stack else 0
    assert total > 100 and entry <= 0.03 * total, f"{entry} of {total} samples at ld.so's entry point"
