"""Source paths as outputs show them: relative to the root of the tree they come from, where one is known.

A frame's file is kept whole in the session and in speedscope's ``file`` field (where a tool opens it); in
frame names (folded stacks, the table of top functions, ``nprof dump``) the part that only says where the
tree was built or installed is left out, as py-spy shortens Python paths:

* **Native code** is relative to the root of the source tree it was compiled in, which the symbolizer gives
  per frame (``FrameInfo.source_root``, from DWARF: ``symbolize/unit_symbols.py``). pyenv's CPython:
  ``/tmp/python-build.20260509073455.222/Python-3.11.7/Python/ceval.c`` -> ``Python/ceval.c``; Debian's:
  ``/build/reproducible-path/python3.11-3.11.2/Objects/dictobject.c`` -> ``Objects/dictobject.c``. A file
  outside that tree (a system header under ``/usr/include``) stays whole, and glibc's files, which Debian
  builds with their paths already relative (``csu/libc-start.c``), are shown as they are.
* **Python code** is relative to the directory its import system found it in, where that is recognisable
  by its name: a ``site-packages`` or ``dist-packages`` directory (pip's, a virtualenv's, Debian's
  ``/usr/lib/python3/dist-packages``), else the standard library's ``lib/pythonX.Y`` (pyenv's
  ``/root/.pyenv/versions/3.11.7/lib/python3.11/json/decoder.py`` and Debian's
  ``/usr/lib/python3.11/json/decoder.py`` are both ``json/decoder.py``; numpy's
  ``.../site-packages/numpy/_core/_methods.py`` is ``numpy/_core/_methods.py``). A script outside them (the
  program's own files) keeps its whole path, which is what tells it from a module of the same name, and
  names such as ``<frozen importlib._bootstrap>`` are not paths.

The rules and the paths they were decided from: docs/decisions/readable-frames.md.
"""

from __future__ import annotations

import re

#: the directories pip and the distributions install packages into (the last one in a path wins, ``.*``
#: being greedy: a virtualenv inside another tree)
_PACKAGES = re.compile(r".*/(?:site|dist)-packages/")
#: the standard library's directory: ``<prefix>/lib/python3.11/`` (``lib64`` on Fedora, ABI flags such as
#: ``python3.13t`` for a free-threaded build): CPython's Makefile.pre.in LIBDEST, ``$(prefix)/lib/python$(VERSION)``
_STDLIB = re.compile(r".*/lib(?:64)?/python\d+\.\d+[a-z]*/")


def short_path(path: str, root: str | None = None) -> str:
    """``path`` as frame names show it (module docstring): relative to ``root`` if it lies under it, else
    to the package or standard-library directory in it, else whole."""
    if root and path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) + 1 :]
    for pattern in (_PACKAGES, _STDLIB):
        found = pattern.match(path)
        if found is not None and found.end() < len(path):
            return path[found.end() :]
    return path
