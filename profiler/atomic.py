"""Atomic output files: write to a temporary file beside the target, fsync, then rename over it.

A reader (or a crash, or Ctrl-C during the write) therefore sees either the old file or the complete new
one, never a truncated profile (DESIGN.md section 5, "Nothing is lost").

An output that is not a regular file cannot be replaced that way: a rename over ``/dev/stdout`` or a FIFO
would put a regular file in its place (as root, over ``/dev/null`` too), and one over a symbolic link
would replace the link and leave the file it names alone. So ``-`` is standard output, a device, FIFO or
socket is written through as a stream, and a link is followed to the file it names, which is replaced
atomically (``write_output``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from profiler.errors import OutputError

#: the output path that means standard output
STDOUT = "-"
#: what an output file is written from: its bytes, or its pieces in order (an exporter that makes a large
#: file piece by piece, so that the file's text is never held whole: ``export/folded.py``)
Output = bytes | bytearray | Iterable[bytes | bytearray]


def is_stream(path: str) -> bool:
    """Whether ``path`` is written through rather than replaced: ``-``, a device, a FIFO or a socket."""
    if path == STDOUT:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def output_label(path: str) -> str:
    """How messages name an output: ``standard output`` for ``-``, else its absolute path."""
    return "standard output" if path == STDOUT else os.path.abspath(path)


def check_writable(path: str) -> None:
    """Fail early, before a recording starts, if ``path`` cannot be created or replaced.

    The check creates (and removes) a temporary file beside ``path``: ``access()`` is not enough, because
    root passes it even on a read-only file system. A stream (``is_stream``) is only checked for access;
    a symbolic link is checked where the file it names is.
    """
    if is_stream(path):
        if path != STDOUT and not os.access(path, os.W_OK):
            raise OutputError(f"Cannot write the output to {path}: permission denied.", "Choose another -o path.")
        return
    path = os.path.realpath(path)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise OutputError(f"Cannot write the output to {path}: it is a directory.", "Give a file name.")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise OutputError(
            f"Cannot write the output to {path}: {directory} is a file, not a directory.",
            "Choose another -o path.",
        )
    if not os.path.isdir(directory):
        raise OutputError(
            f"Cannot write the output to {path}: the directory {directory} does not exist.",
            "Create it first, or choose another -o path.",
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".probe", dir=directory)
    except OSError as e:
        raise OutputError(
            f"Cannot write the output to {path}: {e.strerror.lower() if e.strerror else e} in {directory}.",
            "Choose a directory you can write to with -o.",
        ) from None
    os.close(fd)
    os.unlink(probe)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise OutputError(f"Cannot write the output to {path}: the file is read-only.", "Choose another -o path.")


@contextlib.contextmanager
def atomic_write(path: str, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file; on success it replaces ``path`` in one rename, on error it is removed.
    ``durable``: synced to disk before the rename (a profile; a cache entry, checked on load, need not be)."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(f"Cannot write the output to {path}: {e.strerror}.") from e
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_to(f: BinaryIO, data: Output) -> None:
    if isinstance(data, (bytes, bytearray)):
        f.write(data)
    else:
        for piece in data:
            f.write(piece)


def write_bytes(path: str, data: Output) -> None:
    with atomic_write(path) as f:
        _write_to(f, data)


def write_output(path: str, data: Output) -> None:
    """Write a user's output file: atomically where it is a regular file (or a link to one, which stays a
    link), written through where it is a stream (see the module's docstring). A failure of the write itself
    (a full disk, ``> /dev/full``) is an ``OutputError``, as one found before it is."""
    try:
        if path == STDOUT:
            sys.stdout.flush()
            _write_to(sys.stdout.buffer, data)
            sys.stdout.buffer.flush()
        elif is_stream(path):
            with open(path, "wb") as f:
                _write_to(f, data)
        else:
            write_bytes(os.path.realpath(path), data)
    except OSError as e:
        raise OutputError(f"Cannot write {output_label(path)}: {e.strerror or e}.") from e


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
