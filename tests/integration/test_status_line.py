"""The live status line, as a person sees it in a terminal (stderr is a pseudo-terminal here)."""

from __future__ import annotations

import os
import pty
import re
import subprocess

from tests.support.targets import nprof_command, running_target


def test_status_line_on_a_terminal(chain_fp, tmp_path):
    with running_target([chain_fp]) as target:
        leader, follower = pty.openpty()
        try:
            proc = subprocess.Popen(
                nprof_command("record", "--pid", str(target.pid), "-d", "1.5", "-o", str(tmp_path / "s.json")),
                stdout=subprocess.PIPE, stderr=follower, text=True,
            )  # fmt: skip
            os.close(follower)
            stdout, _ = proc.communicate(timeout=60)
            screen = b""
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # EIO: the terminal's other side is closed
                    break
                if not chunk:
                    break
                screen += chunk
        finally:
            os.close(leader)
    assert proc.returncode == 0
    text = screen.decode()
    lines = re.findall(r"nprof:\s+([\d.]+)s\s+([\d,]+) samples\s+([\d.]+) Hz\s+(\d+) threads?\s+(\d+) errors", text)
    assert lines, text
    elapsed, samples, rate, threads, errors = lines[-1]
    assert float(elapsed) > 0.5 and int(samples.replace(",", "")) > 20 and float(rate) > 20
    assert threads == "1" and errors == "0"
    assert "\r" in text, "redrawn in place"
