"""The CPython agent: Python frames read from a CPython 3.8-3.14 process's memory (DESIGN.md section 4).

``CPythonAgent().detect(process)`` returns a ``CPythonSession`` or None; when None, ``agent.last_reason``
holds the one-line notice to print (not Python, an unsupported version or build...).
"""

from __future__ import annotations

from agents.cpython.detect import DetectError, locate
from agents.cpython.session import CPythonSession
from profiler.binary.objfile import ObjectFileCache
from profiler.target.process import TargetProcess

__all__ = ["CPythonAgent", "CPythonSession"]


class CPythonAgent:
    """Recognises CPython in a process. ``objects`` shares parsed ELF files with the native unwinder."""

    name = "cpython"

    def __init__(self, objects: ObjectFileCache | None = None) -> None:
        self.objects = objects if objects is not None else ObjectFileCache()
        self.last_reason: str | None = ""

    def detect(self, process: TargetProcess) -> CPythonSession | None:
        """A session if the process runs a supported CPython; None (with ``last_reason``) otherwise."""
        try:
            interpreter = locate(process, self.objects)
        except DetectError as e:
            self.last_reason = str(e)
            return None
        self.last_reason = ""
        return CPythonSession(process, interpreter)
