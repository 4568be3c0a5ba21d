"""A capture, decoded after resume into ``RuntimeFrame``s, innermost first, with eval-loop entries marked.

``entry`` marks the first frame of each native eval-loop activation: every frame up to 3.10, ``is_entry`` on
3.11, the frame just newer than a C-stack shim on 3.12+. Shims are kept, marked ``shim`` (an innermost one
``entry`` too: its activation has no frame yet). A frame whose code pointer is not a code object ends the
stack (counted). On 3.11+ a frame before its code's first RESUME is left out, as CPython's tracebacks leave
it out, unless it is an entry.
The rules' sources and the cases they come from: docs/decisions/python-frame-entries.md."""

from __future__ import annotations

from collections.abc import Mapping

from agents.cpython.capture import StackCapture
from agents.cpython.code import SHIM_KEY, UNKNOWN_KEY, CodeInfo
from agents.cpython.layout import FrameLayout, FrameStruct
from profiler.model import RuntimeFrame

#: instruction indexes beyond this are garbage (the biggest real code objects have ~10**5 code units)
MAX_INSTRUCTION = 1 << 24
#: ``owner`` of a generator's or coroutine's frame, Include/internal/pycore_frame.h 3.11-3.14
FRAME_OWNED_BY_GENERATOR = 1


def instruction_offset(frame: FrameLayout, code_adaptive: int, code: int, position: int) -> int:
    """The RuntimeFrame offset: ``f_lasti`` as is (<=3.10: bytes in 3.8/3.9, code units in 3.10), or the
    code-unit index of the instruction pointer inside ``co_code_adaptive`` (3.11+; -1: not started)."""
    if frame.kind is FrameStruct.FRAME_OBJECT:
        return position if -1 <= position < MAX_INSTRUCTION else -1
    index = (position - code - code_adaptive) // 2
    return index if -1 <= index < MAX_INSTRUCTION else -1


def decode_frames(
    capture: StackCapture,
    frame: FrameLayout,
    code_adaptive: int,
    codes: Mapping[int, CodeInfo],
    sources: list[int] | None = None,
) -> tuple[list[RuntimeFrame], bool]:
    """The capture's frames, and whether a bad code pointer cut them short. Uses the keys settled during
    the stop (``capture.code_keys``, from ``CodeCache.decode_new``) and the decoded code objects by key
    (``CodeCache.by_key``, for their prologues): nothing is read from the target. ``sources``, if given,
    receives the index in ``capture.frames`` of each frame returned."""
    out: list[RuntimeFrame] = []
    found: list[int] = []  #: the index in capture.frames of each frame in out
    incomplete: list[int] = []  #: the indexes in out of frames in their prologue
    every_frame_entry = frame.kind is FrameStruct.FRAME_OBJECT
    shims = frame.shim_owners
    key_of = capture.code_keys.get
    cut = False
    for i, (_addr, code, position, flags) in enumerate(capture.frames):
        if flags in shims:
            if out and not out[-1].shim:
                out[-1] = out[-1]._replace(entry=True)
                out.append(RuntimeFrame(SHIM_KEY, -1, False, True))
            else:
                out.append(RuntimeFrame(SHIM_KEY, -1, True, True))
            found.append(i)
            continue
        key = key_of(code)
        if key is None:
            cut = True
            break
        offset = -1 if key == UNKNOWN_KEY else instruction_offset(frame, code_adaptive, code, position)
        info = codes.get(key)
        first = info.first_traceable if info is not None else None  # (3.11+ only)
        # in its prologue: the instruction is before the first traceable one (and inside the code: an index
        # outside it, which instruction_offset clamps to -1, is not a prologue)
        if (first is not None and -1 <= (position - code - code_adaptive) // 2 < first
                and flags & 0xFF != FRAME_OWNED_BY_GENERATOR):  # fmt: skip
            incomplete.append(len(out))
        out.append(RuntimeFrame(key, offset, every_frame_entry or bool(flags & 0x100)))
        found.append(i)
    if incomplete:  # left out, but an activation's entry (known only once its shim was met)
        hidden = {i for i in incomplete if not out[i].entry}
        found = [source for i, source in enumerate(found) if i not in hidden]
        out = [f for i, f in enumerate(out) if i not in hidden]
    if sources is not None:
        sources.extend(found)
    return out, cut
