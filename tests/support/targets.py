"""Build the test targets once per session, and run them with a readiness pipe (never a sleep).

A target gets the write end of a pipe as argv[1] and writes "ready\\n" to it once it is in the state under
test. ``running_target`` always kills and reaps it, whatever the test did.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET_SOURCES = os.path.join(REPO, "tests", "targets")
READY_TIMEOUT = 30.0

#: gcc flag sets the native tests build with
FRAME_POINTERS = ("-O2", "-g", "-fno-omit-frame-pointer")
NO_FRAME_POINTERS = ("-O2", "-g", "-fomit-frame-pointer")


#: one build per (source, its bytes, compiler, flags, libraries) in a test session, kept here and copied
#: where each test asks for it (a test may change its copy)
_BUILT: dict[tuple[object, ...], str] = {}
_BUILD_CACHE: list[str] = []


def build_c(
    source: str,
    out_dir: str,
    flags: Sequence[str],
    name: str | None = None,
    cxx: bool = False,
    libs: Sequence[str] = (),
) -> str:
    """Compile ``source`` (a file of ``tests/targets``, or a path) with ``flags`` (and ``libs`` after it) into
    ``out_dir/name``; returns that path. Each distinct build is compiled once per test session and copied
    from then on, so tests that share a target do not each pay for gcc."""
    path = source if os.path.isabs(source) else os.path.join(TARGET_SOURCES, source)
    with open(path, "rb") as f:
        content = f.read()
    key = (path, hashlib.sha256(content).hexdigest(), cxx, tuple(flags), tuple(libs))
    built = _BUILT.get(key)
    if built is None:
        compiler = shutil.which("g++" if cxx else "gcc")
        if compiler is None:
            raise RuntimeError("gcc/g++ not found: run scripts/setup-tests.sh")
        if not _BUILD_CACHE:
            _BUILD_CACHE.append(tempfile.mkdtemp(prefix="nprof-test-builds-"))
            atexit.register(shutil.rmtree, _BUILD_CACHE[0], True)
        built = os.path.join(_BUILD_CACHE[0], f"{len(_BUILT)}-{os.path.basename(path)}.out")
        cmd = [compiler, *flags, "-pthread", "-o", built, path, *libs]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"building {source} failed: {' '.join(cmd)}\n{result.stderr}")
        _BUILT[key] = built
    out = os.path.join(out_dir, name or os.path.splitext(os.path.basename(source))[0])
    shutil.copy2(built, out)
    return out


def wait_ready(fd: int, proc: subprocess.Popen, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    buf = b""
    while b"ready\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"target {proc.args} did not signal readiness in {timeout}s")
        readable, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        if readable:
            chunk = os.read(fd, 64)
            if not chunk:
                raise RuntimeError(f"target {proc.args} exited before signalling readiness ({proc.poll()})")
            buf += chunk
        elif proc.poll() is not None:
            raise RuntimeError(f"target {proc.args} exited with {proc.returncode} before readiness")


@contextlib.contextmanager
def running_target(
    argv: Sequence[str], env: dict[str, str] | None = None, ready_at: int = 1, cpu: int | None = None,
    pass_fds: Sequence[int] = (),
) -> Iterator[subprocess.Popen]:
    """Start ``argv`` with the ready fd inserted at position ``ready_at`` (after the program by default;
    after the script for an interpreter), yield once it wrote "ready"; kill and reap it afterwards.
    ``cpu``: run it on that CPU only; ``pass_fds``: more descriptors it inherits (named in ``argv``)."""
    r, w = os.pipe()
    argv = list(argv)
    cmd = [*argv[:ready_at], str(w), *argv[ready_at:]]
    proc = subprocess.Popen(cmd, pass_fds=[w, *pass_fds], env=env, stdin=subprocess.DEVNULL, preexec_fn=on_cpu(cpu))
    os.close(w)
    try:
        wait_ready(r, proc)
        yield proc
    finally:
        os.close(r)
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def nprof_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "profiler", *args]


def record(
    pid: int, out: str, *extra: str, duration: str = "2", cwd: str | None = None
) -> subprocess.CompletedProcess:
    """``nprof record --pid PID -d DURATION -o OUT EXTRA...`` (in ``cwd``), which must succeed, and say
    nothing of a traceback."""
    result = subprocess.run(nprof_command("record", "--pid", str(pid), "-d", duration, "-o", out, *extra),
                            capture_output=True, text=True, timeout=120, cwd=cwd)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback (most recent call last)" not in result.stderr
    return result


def run_nprof(*args: str, timeout: float = 120, cpu: int | None = None) -> subprocess.CompletedProcess:
    """``nprof ARGS``; ``cpu``: run it on that CPU only."""
    return subprocess.run(nprof_command(*args), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=on_cpu(cpu))  # fmt: skip


def run_nprof_with(source: str, directory: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m`` a module of ``source`` (written to ``directory``) that changes nprof and runs it with
    ``args``: as ``python -m profiler`` runs, for CPython ends a ``-m`` run differently from a ``-c`` one
    (a KeyboardInterrupt caught after an ``exec`` of source text raised it ends only a ``-m`` run by
    SIGINT)."""
    (directory / "nprof_changed.py").write_text(source)
    path = os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "nprof_changed", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": path})  # fmt: skip


#: a directory name that is not UTF-8 (Latin-1 "café"), as ``os.fsdecode`` gives it: a lone surrogate
NOT_UTF8_NAME = os.fsdecode(b"caf\xe9")


def run_nprof_without_map_files(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``nprof ARGS`` as a user other than root runs it: without /proc/PID/map_files, whose links take
    CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE to follow (proc(5)), so every file is opened by the path the
    maps give. Run as root, those two capabilities are dropped from the bounding set (setpriv(1))."""
    command = nprof_command(*args)
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set", "-sys_admin,-checkpoint_restore", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def on_cpu(cpu: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that confines the child to one CPU (None: no confinement)."""
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def process_state(pid: int) -> tuple[str, int] | None:
    """(State letter, TracerPid) from /proc/PID/status, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return fields["State"].split()[0], int(fields["TracerPid"])


def thread_states(pid: int) -> dict[int, tuple[str, int]]:
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        out[int(tid)] = (fields["State"].split()[0], int(fields["TracerPid"]))
    return out


def assert_running_free(pid: int) -> None:
    """The target and all its threads are neither stopped nor traced."""
    for tid, (state, tracer) in thread_states(pid).items():
        assert state not in ("t", "T"), f"thread {tid} of {pid} is left stopped ({state})"
        assert tracer == 0, f"thread {tid} of {pid} is still traced by {tracer}"


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.01) -> bool:
    """Poll a condition on the system's state (not a sleep to synchronise with a target)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
