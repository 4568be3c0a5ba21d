"""Outputs that are not plain files: standard output, a FIFO, a device, a symbolic link. None is replaced by
a regular file (a rename over /dev/null would replace it for the whole machine), and the session file goes
where it can be written."""

from __future__ import annotations

import os
import stat
import subprocess
import threading

import pytest

from tests.support.targets import nprof_command, run_nprof, running_target


def run_record(pid: int, *args: str, cwd: str) -> subprocess.CompletedProcess:
    """``nprof record --pid PID -d 0.5 ARGS...`` in ``cwd``, whatever it ends with (output tests try failing ones)."""
    return subprocess.run(nprof_command("record", "--pid", str(pid), "-d", "0.5", *args), capture_output=True,
                          text=True, timeout=120, cwd=cwd)  # fmt: skip


def folded_lines(text: str) -> list[tuple[str, int]]:
    out = []
    for line in text.splitlines():
        stack, count = line.rsplit(" ", 1)
        out.append((stack, int(count)))
    return out


def sessions(directory: str) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith(".nprof")]


def test_output_to_standard_output(chain_fp, tmp_path):
    with running_target([chain_fp]) as target:
        result = run_record(target.pid, "-f", "folded", "-o", "-", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = folded_lines(result.stdout)  # nothing but the profile: nprof's own messages are on stderr
    assert lines and any("spin" in stack for stack, _ in lines), result.stdout
    assert "wrote folded to standard output" in result.stderr
    assert len(sessions(str(tmp_path))) == 1, "the session goes to the default name in the current directory"


def test_output_through_a_symbolic_link_keeps_the_link(chain_fp, tmp_path):
    real, link = tmp_path / "real.folded", tmp_path / "link.folded"
    real.write_text("")
    link.symlink_to(real.name)
    with running_target([chain_fp]) as target:
        result = run_record(target.pid, "-o", str(link), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and folded_lines(real.read_text()), "the file the link names was replaced"


def test_output_to_a_fifo(chain_fp, tmp_path):
    fifo = tmp_path / "out.folded"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    with running_target([chain_fp]) as target:
        result = run_record(target.pid, "-o", str(fifo), cwd=str(tmp_path))
    if result.returncode != 0:
        with open(fifo, "w"):  # let the reader go
            pass
    reader.join(timeout=30)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "still a FIFO"
    assert received and folded_lines(received[0])
    assert len(sessions(str(tmp_path))) == 1, "the session goes to the default name in the current directory"


def test_output_to_a_device_is_not_replaced(chain_fp, tmp_path):
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("making a device file needs CAP_MKNOD")
    with running_target([chain_fp]) as target:
        result = run_record(target.pid, "-o", str(device), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.lstat(device).st_mode), "still the device"
    assert len(sessions(str(tmp_path))) == 1


def test_output_that_is_where_its_session_goes(chain_fp, tmp_path):
    with running_target([chain_fp]) as target:
        result = run_record(target.pid, "-f", "folded", "-o", "out.nprof", cwd=str(tmp_path))
        assert open(f"/proc/{target.pid}/status").read().count("TracerPid:\t0") == 1, "refused before attaching"
    assert result.returncode == 2 and "nprof: error: The output out.nprof is where the session" in result.stderr
    assert "out.folded" in result.stderr and not os.listdir(tmp_path)


def test_report_with_a_format_and_no_output_writes_to_standard_output(chain_fp, tmp_path):
    out = str(tmp_path / "chain.folded")
    with running_target([chain_fp]) as target:
        assert run_record(target.pid, "-o", out, cwd=str(tmp_path)).returncode == 0
    result = run_nprof("report", str(tmp_path / "chain.nprof"), "-f", "folded")
    assert result.returncode == 0, result.stderr
    assert sorted(folded_lines(result.stdout)) == sorted(folded_lines(open(out).read()))
    assert "Top functions" in result.stderr


def test_report_idle_of_a_recording_without_idle_says_its_idle_stacks_are_stale(chain_fp, tmp_path):
    """Without --idle a sleeping thread is not stopped, and its idle samples count the stack it had when
    last seen running (a main thread in Thread.join showed an import of its start-up)."""
    with running_target([chain_fp]) as target:
        assert run_record(target.pid, "-o", "plain.folded", cwd=str(tmp_path)).returncode == 0
        assert run_record(target.pid, "--idle", "-o", "idle.folded", cwd=str(tmp_path)).returncode == 0
    plain = run_nprof("report", str(tmp_path / "plain.nprof"), "--idle")
    exact = run_nprof("report", str(tmp_path / "idle.nprof"), "--idle")
    assert plain.returncode == exact.returncode == 0, plain.stderr + exact.stderr
    assert "recorded without --idle: an idle sample shows the stack" in plain.stderr
    assert "recorded without --idle" not in exact.stderr


def test_report_to_a_full_device_is_an_error_not_a_traceback(chain_fp, tmp_path):
    """A write that fails as it is made (a full disk; /dev/full) was an internal error of `report`, with a
    traceback and status 70 (a sweep); `record` already said so in one line."""
    with running_target([chain_fp]) as target:
        assert run_record(target.pid, "-o", str(tmp_path / "chain.folded"), cwd=str(tmp_path)).returncode == 0
    session = str(tmp_path / "chain.nprof")
    to_device = run_nprof("report", session, "-o", "/dev/full", "-f", "folded")
    with open("/dev/full", "wb") as full:
        to_stdout = subprocess.run(nprof_command("report", session, "-f", "folded"), stdout=full,
                                   stderr=subprocess.PIPE, text=True, timeout=60)  # fmt: skip
    for result, where in ((to_device, "/dev/full"), (to_stdout, "standard output")):
        assert result.returncode == 5, result.stderr
        assert f"nprof: error: Cannot write {where}: No space left on device." in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
