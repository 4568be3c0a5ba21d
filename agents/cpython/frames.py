"""A capture, decoded after resume into ``RuntimeFrame``s, innermost first, with eval-loop entries marked.

``entry`` marks the frame a native ``_PyEval_EvalFrameDefault`` activation started with, so the merge can
give each anchor its group: reading innermost first, an anchor's group ends at (and includes) the next frame
with ``entry`` set (reference sections 2.6 and 4.3).

* 3.8-3.10: every frame (each Python call is its own C call of the eval loop).
* 3.11: the frame's ``is_entry``.
* 3.12+: the eval loop pushes a C-stack *shim* frame (``owner`` FRAME_OWNED_BY_CSTACK; 3.14 also
  FRAME_OWNED_BY_INTERPRETER) under the first frame it runs, so the frame just newer than a shim is the entry.
  Shims are **kept**, as ``RuntimeFrame(SHIM_KEY, -1, entry=False, shim=True)``, so consumers can see the
  exact activation boundaries; they are not Python code and should not be displayed. One case needs the shim
  itself: when the innermost frame is a shim, its activation has not pushed a Python frame yet (or has just
  popped its last), and the shim is marked ``entry=True`` so that activation's anchor still has a group (of
  one invisible frame) and the others stay aligned. This is pystack's rule.

A frame whose code pointer is not a code object ends the stack there (truncated, counted by the session):
past a bad frame nothing can be trusted.
"""

from __future__ import annotations

from agents.cpython.capture import StackCapture
from agents.cpython.code import SHIM_KEY, UNKNOWN_KEY
from agents.cpython.layout import FrameKind, FrameLayout
from profiler.model import RuntimeFrame

#: instruction indexes beyond this are garbage (the biggest real code objects have ~10**5 code units)
MAX_INSTRUCTION = 1 << 24


def instruction_offset(frame: FrameLayout, code_adaptive: int, code: int, position: int) -> int:
    """The RuntimeFrame offset: ``f_lasti`` as is (<=3.10: bytes in 3.8/3.9, code units in 3.10), or the
    code-unit index of the instruction pointer inside ``co_code_adaptive`` (3.11+; -1: not started)."""
    if frame.kind is FrameKind.FRAME_OBJECT:
        return position if -1 <= position < MAX_INSTRUCTION else -1
    index = (position - code - code_adaptive) // 2
    return index if -1 <= index < MAX_INSTRUCTION else -1


def decode_frames(capture: StackCapture, frame: FrameLayout, code_adaptive: int) -> tuple[list[RuntimeFrame], bool]:
    """The capture's frames, and whether a bad code pointer cut them short. Uses the keys settled during
    the stop (``capture.code_keys``, from ``CodeCache.decode_new``): nothing is read from the target and
    the code cache is not consulted."""
    out: list[RuntimeFrame] = []
    every_frame_entry = frame.kind is FrameKind.FRAME_OBJECT
    shims = frame.shim_owners
    key_of = capture.code_keys.get
    for _addr, code, position, flags in capture.frames:
        if flags in shims:
            if out and not out[-1].shim:
                out[-1] = out[-1]._replace(entry=True)
                out.append(RuntimeFrame(SHIM_KEY, -1, False, True))
            else:
                out.append(RuntimeFrame(SHIM_KEY, -1, True, True))
            continue
        key = key_of(code)
        if key is None:
            return out, True
        offset = -1 if key == UNKNOWN_KEY else instruction_offset(frame, code_adaptive, code, position)
        out.append(RuntimeFrame(key, offset, every_frame_entry or bool(flags & 0x100)))
    return out, False
