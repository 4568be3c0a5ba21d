"""The error hierarchy: one root, and user-facing subclasses that say what to do.

Only attach and setup raise (DESIGN.md section 5): a failure inside one sample is counted as data instead.
The CLI prints ``str(error)`` as one paragraph and exits with ``error.exit_code``; it never shows a traceback
for an ``NprofError``.
"""

from __future__ import annotations


class NprofError(Exception):
    """Root of every error nprof raises on purpose. ``help`` is advice printed after the message."""

    exit_code = 1

    def __init__(self, message: str, help: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.help = help

    def __str__(self) -> str:
        return f"{self.message} {self.help}".strip()


class UsageError(NprofError):
    """Bad command-line input: an unknown format, conflicting options."""

    exit_code = 2


class TargetError(NprofError):
    """The target cannot be profiled: it does not exist, is a kernel thread, or is the wrong architecture."""

    exit_code = 3


class NoSuchProcess(TargetError):
    def __init__(self, pid: int) -> None:
        super().__init__(
            f"No process with pid {pid} exists.",
            "Check the pid with `ps -e` or `pgrep NAME`; if the target runs in a container, give the pid "
            "as the host sees it (the first number of the NSpid line in /proc/PID/status on the host).",
        )


class PermissionDenied(NprofError):
    """ptrace or /proc access was refused; ``help`` holds the diagnosis for this machine."""

    exit_code = 4


class OutputError(NprofError):
    """The output file cannot be written."""

    exit_code = 5


class BinaryError(NprofError):
    """An ELF file or its unwind/symbol tables could not be read. Per module, never fatal to a recording."""


class SessionFormatError(NprofError):
    """A .nprof session file is corrupt or from an incompatible version."""

    exit_code = 6
