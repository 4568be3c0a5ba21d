"""What makes two frames the same frame in outputs: their function (``--function``, the default), or their
function and the line sampled (``--lines``, py-spy's default view), and how a frame is labelled.

Every address of a native function and every instruction of a Python one is a frame of the session, named
with the line it was at. Outputs that merge frames by what they show (a folded line's text, a speedscope
frame's name, file and line) split a function into one tower per line sampled unless the line is left out
of what they show: with ``--function`` a frame is shown as its function, where it is declared (the file
and line of ``FrameInfo.function_file``/``function_line``: ``Python/ceval.c`` for every line of
``_PyEval_EvalFrameDefault``, ``json/decoder.py:332`` for every line of ``JSONDecoder.decode``).
``shown_frame`` makes that view of a frame; the exporters and the table then merge equal frames as before.
A native frame whose declaration is unknown (no DWARF, or a session written before declarations were kept)
is its name in its module.

Labels (folded stacks, ``nprof dump``) shorten paths (``source_paths.py``); speedscope's ``file`` field keeps
them whole. Measured, and why the declaration: docs/decisions/readable-frames.md.
"""

from __future__ import annotations

from profiler.model import FrameInfo
from profiler.tree.source_paths import short_path


def shown_frame(info: FrameInfo, lines: bool) -> FrameInfo:
    """``info`` as outputs identify it: itself with ``lines``; else its function's file and line in place of
    the sample's (a native frame's file left out where its declaration is unknown: its module says where)."""
    if lines:
        return info
    if info.function_file is not None:
        file, line = info.function_file, info.function_line
    elif info.module is not None:  # native, declaration unknown
        file, line = None, None
    else:  # runtime, from a session that kept no first line
        file, line = info.file, None
    # (the constructor, not dataclasses.replace: once per frame of a session, 5-8 times faster)
    return FrameInfo(info.name, file, line, info.module, info.inlined, info.interpreter, info.function_file,
                     info.function_line, info.source_root, info.startup, info.mechanism)  # fmt: skip


def frame_label(info: FrameInfo, lines: bool) -> str:
    """How a frame is named in text outputs: ``name (file:line)`` with ``lines``, ``name (file)`` without,
    ``name [module]`` for a native frame without a file, the path shortened (``source_paths.short_path``)."""
    if info.file:
        where = short_path(info.file, info.source_root)
        return f"{info.name} ({where}:{info.line})" if lines and info.line else f"{info.name} ({where})"
    if info.module:
        return f"{info.name} [{info.module}]"
    return info.name
