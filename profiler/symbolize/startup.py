"""Which native frames are start-up code: what runs from a process's or thread's first instruction into a
runtime's first frame (docs/decisions/readable-frames.md). ``--hide-interpreter`` hides them outward of a
stack's first runtime frame (``tree/display.py``), so that a Python stack starts at ``<module>``, or a
thread's at ``Thread._bootstrap``, where before it started under 17 frames of C start-up (CPython 3.11:
``_start``, ``__libc_start_main_impl``, ``__libc_start_call_main``, ``Py_BytesMain``, ``pymain_main``,
``Py_RunMain``, ... ``PyEval_EvalCode``, ``_PyEval_EvalFrameDefault``; a thread's ``clone3``,
``start_thread``, ``pythread_wrapper``, ``thread_run``).

Each kind is known where it is sound to know it:

* **The runtime's own code**: every frame of a module its agent calls its own (``InterpreterCode``: for
  CPython, libpython or a static ``python3.X``, and its launcher). Outward of the first Python frame, such
  code can only be starting the interpreter or a thread of it. A program that embeds the interpreter keeps
  its own frames (its ``main``), which are not the runtime's.
* **The C library** (its start of a process, ``__libc_start_main``, and of a thread, ``start_thread`` and
  ``clone3``): no agent knows it, and it is the same for every runtime, so its files are known by name
  (``C_LIBRARY_FILES``), and so are its functions' frames whether its symbols name them or not (Debian sid's
  libc.so.6 is stripped: a main thread's stacks start ``_start``, ``libc.so.6+0x29f40`` there).
* **The program's entry point** ``_start`` (``ENTRY_POINT``), which the C library's ``crt1.o`` puts in every
  executable, the embedding program's too.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence

from profiler.model import FrameInfo, FrameKind, Module
from profiler.profile.tables import FrameKey
from profiler.runtime import AgentSession, InterpreterCode

#: the files of the C library and of its dynamic loader, as the maps name them: glibc installs
#: ``libc.so.6`` and ``ld-linux-x86-64.so.2`` (``ld-linux-aarch64.so.1``) from 2.34 on, and ``libc-2.31.so``,
#: ``ld-2.31.so`` before (its Makerules' versioned names, under symbolic links named for the sonames); musl
#: is ``ld-musl-x86_64.so.1``, linked as ``libc.musl-x86_64.so.1`` by Alpine
C_LIBRARY_FILES = re.compile(
    r"^(?:libc\.so\.6|libc-2\.\d+\.so|ld-linux-[\w-]+\.so\.\d|ld-2\.\d+\.so|ld-musl-\w+\.so\.1|libc\.musl-\w+\.so\.1)$"
)
#: the ELF entry point of a program, from the C library's crt1.o: glibc's sysdeps/x86_64/start.S (also the
#: dynamic loader's own entry, sysdeps/x86_64/dl-machine.h), musl's crt/x86_64/crt_arch.h
ENTRY_POINT = "_start"


def is_c_library(path: str) -> bool:
    """``path`` is a file of the C library or of its dynamic loader (``C_LIBRARY_FILES``)."""
    return C_LIBRARY_FILES.match(os.path.basename(path.removesuffix(" (deleted)"))) is not None


def mark_startup_frames(
    keys: Sequence[FrameKey],
    modules: Sequence[Module],
    infos: list[FrameInfo],
    agents: Mapping[str, AgentSession],
) -> None:
    """Flag ``startup`` on the out-of-line native frames of ``infos`` (indexed like ``keys``) that are start-up
    code (module docstring). The calls inlined at such a frame go with it (``tree/display.py``)."""
    own = [a.is_interpreter_module for a in agents.values() if isinstance(a, InterpreterCode)]
    of_module: dict[int, bool] = {}
    for i, info in enumerate(infos):
        kind, mid, _rel, _offset = keys[i]
        if kind != FrameKind.NATIVE or info.startup:
            continue
        if mid not in of_module:
            path = modules[mid].path if 0 <= mid < len(modules) else None
            of_module[mid] = path is not None and (is_c_library(path) or any(check(path) for check in own))
        if of_module[mid] or info.name == ENTRY_POINT:
            infos[i] = dataclasses.replace(info, startup=True)
