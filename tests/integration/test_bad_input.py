"""Bad input gets one clear paragraph and a non-zero exit code, never a traceback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from profiler.target.permissions import has_cap_sys_ptrace
from profiler.target.procfs import tracer_process
from tests.support.elf32 import write_i386_binary
from tests.support.targets import (
    assert_running_free,
    nprof_command,
    process_state,
    run_nprof,
    run_nprof_with,
    running_target,
    stop,
    wait_until,
)


def assert_error(result: subprocess.CompletedProcess, code: int, *phrases: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback (most recent call last)" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("nprof: error: ")]
    assert len(errors) == 1, result.stderr  # one paragraph (notices such as "not Python" may precede it)
    for phrase in phrases:
        assert phrase in errors[0], result.stderr


def free_pid() -> int:
    probe = subprocess.Popen(["true"])
    probe.wait()
    return probe.pid  # reaped: nothing has this pid now (pids are not reused this fast)


def test_pid_that_does_not_exist():
    pid = free_pid()
    assert_error(run_nprof("record", "--pid", str(pid), "-d", "1"), 3, f"No process with pid {pid}")


def test_nprof_itself():
    # exec keeps the shell's pid, so $$ is nprof's own pid
    result = subprocess.run(["sh", "-c", 'exec "$@" --pid $$ -d 1', "sh", *nprof_command("record")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_error(result, 3, "is this nprof itself")


def test_kernel_thread():
    with open("/proc/2/stat") as f:
        flags = int(f.read().rsplit(")", 1)[1].split()[6])
    if not flags & 0x00200000:
        pytest.skip("pid 2 is not kthreadd on this system")
    assert_error(run_nprof("record", "--pid", "2", "-d", "1"), 3, "kernel thread", "perf record")


def test_permission_denied(tmp_path):
    """nprof without CAP_SYS_PTRACE against another user's process."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to create another user's process")
    target = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
    try:
        assert wait_until(lambda: open(f"/proc/{target.pid}/comm").read().strip() == "sleep")
        no_ptrace = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
        result = subprocess.run(
            no_ptrace + nprof_command("record", "--pid", str(target.pid), "-d", "1", "-o", str(tmp_path / "x.json")),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert_error(result, 4, "Permission denied", "uid 65534", "CAP_SYS_PTRACE")
        assert "SYS_PTRACE" in result.stderr  # the container advice, or the capability to grant
    finally:
        stop(target)


@pytest.mark.parametrize("command", ["record", "dump"])
def test_process_outside_nprofs_user_namespace(command, chain_fp, tmp_path):
    """nprof in a user namespace (``unshare --user``: a rootless container) against a process outside it: its
    capabilities do not count there. /proc/PID/maps, read before the attach, is refused under the attach's
    rules; both get the diagnosis, and no traceback."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    in_namespace = ["unshare", "--user", "--map-root-user"]
    probe = subprocess.run([*in_namespace, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a user namespace here: {probe.stderr.strip()}")
    with running_target([chain_fp]) as target:
        out = ["-d", "1", "-o", str(tmp_path / "x.json")] if command == "record" else []
        result = subprocess.run([*in_namespace, *nprof_command(command, "--pid", str(target.pid), *out)],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert_error(result, 4, f"Permission denied reading /proc/{target.pid}/maps", "user namespace",
                     "outside it")  # fmt: skip
        assert not os.path.exists(tmp_path / "x.json")
        assert_running_free(target.pid)


def test_target_already_traced(chain_fp, tmp_path):
    """A second profiler (or a debugger) on the same process: the error names the tracer that holds it."""
    with running_target([chain_fp]) as target:
        first = subprocess.Popen(nprof_command("record", "--pid", str(target.pid), "-o", str(tmp_path / "1.json")),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            assert wait_until(lambda: tracer_process(process_state(target.pid)[1]) == first.pid)
            result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", str(tmp_path / "2.json"))
            assert_error(result, 4, "Permission denied", f"already being traced by pid {first.pid}",
                         "only one tracer")  # fmt: skip
            assert "profiling native frames" not in result.stderr, "nothing is profiled: no notice says it is"
            if has_cap_sys_ptrace():  # then a container's missing capability is not what refused
                assert "container" not in result.stderr
        finally:
            first.terminate()
            first.wait(timeout=60)


def test_output_piped_into_a_reader_that_leaves(chain_fp):
    """`nprof dump --pid P | head -1`: the reader is gone before nprof prints; nprof ends quietly, as a
    shell tool ends on SIGPIPE, and the target runs on."""
    with running_target([chain_fp]) as target:
        dump = subprocess.Popen(nprof_command("dump", "--pid", str(target.pid)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        dump.stdout.close()  # before nprof has printed anything
        stderr = dump.stderr.read()
        assert dump.wait(timeout=60) == 128 + signal.SIGPIPE, stderr
        assert "Traceback (most recent call last)" not in stderr and "internal error" not in stderr, stderr
        assert_running_free(target.pid)


def without_sys_nice(*args: str) -> list[str]:
    """``nprof ARGS`` as root without CAP_SYS_NICE (and no RLIMIT_RTPRIO): SCHED_FIFO is refused."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_SYS_NICE")
    return ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", *nprof_command(*args)]


def test_priority_fifo_not_permitted_fails_before_spawning(tmp_path):
    marker = tmp_path / "spawned"
    cmd = without_sys_nice("record", "--priority", "fifo", "-d", "1", "-o", str(tmp_path / "x.folded"),
                           "--", "touch", str(marker))  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert_error(result, 4, "--priority fifo", "SCHED_FIFO", "CAP_SYS_NICE", "--priority auto")
    assert not marker.exists(), "the command was spawned although nprof could not record as asked"


def test_priority_auto_not_permitted_records_with_a_notice(chain_fp, tmp_path):
    out = tmp_path / "x.folded"
    with running_target([chain_fp]) as target:
        cmd = without_sys_nice("record", "--pid", str(target.pid), "-d", "1", "-o", str(out))
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "real-time priority (SCHED_FIFO)" in result.stderr and "--cap-add SYS_NICE" in result.stderr
    assert out.stat().st_size > 0


def test_foreign_architecture():
    """A 32-bit i386 process (the kernel runs it through IA-32 emulation)."""
    directory = tempfile.mkdtemp()
    try:
        binary = write_i386_binary(os.path.join(directory, "pause32"))
        try:
            target = subprocess.Popen([binary])
        except OSError as e:
            pytest.skip(f"this kernel cannot run i386 binaries: {e}")
        try:
            assert_error(run_nprof("record", "--pid", str(target.pid), "-d", "1"), 3, "32-bit i386", "x86-64")
        finally:
            stop(target)
    finally:
        shutil.rmtree(directory)


def test_ctrl_c_while_nprof_starts_is_answered_though_nprof_was_started_with_it_ignored(tmp_path):
    """A script's background job starts with SIGINT ignored, and ``kill -INT $!`` is how the script stops
    it: while the command line imported (0.5-1.8 s), the signal was lost, and nprof recorded on."""
    ignored_then_signalled = (
        "import builtins, os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "real = builtins.__import__\n"
        "def signalled(name, *args, **kwargs):\n"
        "    if name == 'profiler.cli.main':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = signalled\n"
        "from profiler.entry import main\n"
        "sys.exit(main())\n"
    )
    result = run_nprof_with(ignored_then_signalled, tmp_path, "record", "-d", "1", "--", "true")
    assert result.returncode == 130, result.stderr
    assert "interrupted by SIGINT while starting; nothing was recorded" in result.stderr


def test_a_foreign_command_is_refused_before_it_starts(tmp_path):
    """``record -- PROGRAM`` of a 32-bit program: it was found only in its exec stop, resumed there, and ran
    on in the background once nprof had exited with its error."""
    binary = write_i386_binary(str(tmp_path / "pause32"))
    assert_error(run_nprof("record", "-d", "1", "-o", str(tmp_path / "p.folded"), "--", binary), 3, "32-bit i386",
                 "x86-64")  # fmt: skip
    started = subprocess.run(["pgrep", "-f", binary], capture_output=True, text=True).stdout.split()
    for pid in started:  # (left running before: it pauses for ever)
        os.kill(int(pid), signal.SIGKILL)
    assert not started, "the program was started"


def test_an_exec_of_a_foreign_program_is_let_go_with_a_notice(tmp_path):
    """A shell that execs a 32-bit program mid-recording: its samples were unwound with x86-64 rules, wrong
    and with nothing said (a sweep). It is detached at its exec stop, told of, and runs on untraced."""
    binary = write_i386_binary(str(tmp_path / "pause32"))
    nprof = subprocess.Popen(nprof_command("record", "-d", "30", "-o", str(tmp_path / "p.folded"), "--", "sh", "-c",
                                           f"exec {binary}"),
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lines = []
        for line in nprof.stderr:
            lines.append(line)
            if "waiting for sh" in line:  # the recording ended: nothing is left to sample
                break
        text = "".join(lines)
        assert "exec'd" in text and "a 32-bit i386 executable" in text and "runs on unprofiled" in text, text
        assert "nprof: target exec'd a 32-bit i386 executable and was let go, unprofiled; " in text, text
        with open(f"/proc/{nprof.pid}/task/{nprof.pid}/children") as f:
            children = [int(pid) for pid in f.read().split()]
        # sh, which exec'd the program (and not nprof's DWARF worker, ``symbolize/prefetch.py``, if still there)
        [command] = [c for c in children if b"symbolize.prefetch" not in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert os.readlink(f"/proc/{command}/exe") == binary
        assert_running_free(command)
        os.kill(command, signal.SIGKILL)
        assert nprof.wait(timeout=60) == 128 + signal.SIGKILL
    finally:
        if nprof.poll() is None:
            nprof.kill()
            nprof.wait()


@pytest.mark.parametrize(
    "output, phrase",
    [
        ("/nonexistent-dir/out.speedscope.json", "does not exist"),
        ("/proc/nprof-out.speedscope.json", "Cannot write the output"),
        ("/etc/hostname/out.speedscope.json", "/etc/hostname is a file, not a directory"),
    ],
)
def test_output_path_not_writable(chain_fp, output, phrase):
    with running_target([chain_fp]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", output)
        assert_error(result, 5, phrase)
        assert open(f"/proc/{target.pid}/status").read().count("TracerPid:\t0") == 1, "checked before attaching"


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["-o", "out.xyz"], "Cannot tell the output format"),
        (["-f", "bogus", "-o", "out.json"], "Unknown output format 'bogus'"),
        (["-r", "0"], "--rate 0 is out of range"),
        (["-r", "nan"], "--rate nan is out of range"),
        (["-d", "nan"], "--duration nan is not a positive number"),
        (["-d", "-1"], "--duration -1 is not a positive number"),
        (["--stack-bytes", "0"], "--stack-bytes 0 is out of range"),
        (["--max-stack-bytes", str(16 << 20)], f"--max-stack-bytes {16 << 20} is out of range"),
    ],
)
def test_bad_options(args, phrase, tmp_path):
    result = run_nprof("record", "--pid", str(os.getpid()), "-d", "1", *args)
    assert_error(result, 2, phrase)


def test_neither_pid_nor_command():
    assert_error(run_nprof("record", "-d", "1"), 2, "Give either --pid PID or a command")


def test_command_not_found():
    assert_error(run_nprof("record", "-d", "1", "--", "/no/such/command"), 2, "Command not found")


def test_corrupt_session_file(tmp_path):
    bad = tmp_path / "bad.nprof"
    bad.write_bytes(b"this is not a zip archive")
    assert_error(run_nprof("report", str(bad), "-o", str(tmp_path / "x.folded")), 6, "not an nprof session file")


@pytest.mark.parametrize("raised", ["raise KeyboardInterrupt", "exec('os.kill(os.getpid(), signal.SIGINT)')"])
def test_ctrl_c_while_nprof_starts_is_not_a_traceback(raised, tmp_path):
    """Ctrl-C during the command line's imports (0.5-1.8 s here) printed a KeyboardInterrupt traceback from
    numpy's or capstone's import. The import is made to raise it here, deterministically; or to get a real
    SIGINT inside an ``exec`` of source text, as a dataclass's import does: raised there, the interrupt was
    caught and reported, and CPython then ended nprof by SIGINT all the same (status -2)."""
    raise_in_import = (
        "import builtins, os, signal, sys\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'profiler.cli.main':\n"
        f"        {raised}\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        "from profiler.entry import main\n"
        "sys.exit(main())\n"
    )
    result = run_nprof_with(raise_in_import, tmp_path)
    assert result.returncode == 130 and "Traceback (most recent call last)" not in result.stderr, result.stderr
    assert "interrupted by SIGINT while starting; nothing was recorded" in result.stderr
