"""``str`` and ``bytes`` objects read from the target (names, file names, line tables, locals).

PEP 393 strings (Include/cpython/unicodeobject.h, 3.8-3.14 default builds): ``length`` in code points at
+16, a 32-bit ``state`` at +32 whose bits are

* 0-1 ``interned``, 2-4 ``kind`` (1 = Latin-1, 2 = UCS2, 4 = UCS4; 0 = a not-ready legacy string, <=3.11),
* 5 ``compact``, 6 ``ascii``, 7 ``ready`` (<=3.11) or ``statically_allocated`` (3.12+).

A compact ASCII string's characters follow the ``PyASCIIObject`` header; other compact strings' follow the
``PyCompactUnicodeObject`` header; a legacy (non-compact) string points to them from ``PyUnicodeObject.data``,
the word right after the compact header. Strings in code objects are always compact, but a local variable's
value may be anything, so all three are handled, and every length is bounded.
"""

from __future__ import annotations

from agents.cpython.layout import ObjectLayout
from agents.cpython.memory import Read, i64, plausible, read_exact, u32, u64

#: longest string the agent decodes; longer ones are cut (names and paths are far shorter)
MAX_CHARS = 4096
#: longest bytes object read whole (line tables; bounded again by the line-table decoder)
MAX_BYTES = 1 << 20
#: bytes of a str read on the first attempt: header and, usually, every character
STR_FIRST_READ = 160
#: bytes of a bytes object's contents read on the first attempt, with its header (most line tables)
BYTES_FIRST_READ = 256

_CODECS = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}


def unicode_state(state: int) -> tuple[int, bool, bool]:
    """(kind, compact, ascii) from ``PyASCIIObject.state``."""
    return (state >> 2) & 7, bool(state >> 5 & 1), bool(state >> 6 & 1)


def decode_chars(data: bytes, kind: int) -> str:
    return data.decode(_CODECS[kind], errors="replace")


def read_str(
    read: Read, addr: int, objects: ObjectLayout, str_type: int | None = None, max_chars: int = MAX_CHARS
) -> str | None:
    """The text of the ``str`` at ``addr``; None if it is not a readable str (wrong type, not ready, garbage).

    ``str_type`` is ``&PyUnicode_Type`` in the target: when given, ``ob_type`` must equal it.
    """
    if not plausible(addr):
        return None
    head = read(addr, STR_FIRST_READ)
    if len(head) < objects.unicode_compact_size:
        # a compact ASCII string may end before the compact header size; retry with exactly its header
        head = read(addr, objects.unicode_ascii_size)
        if len(head) < objects.unicode_ascii_size:
            return None
    if str_type is not None and u64(head, objects.ob_type) != str_type:
        return None
    length = i64(head, objects.unicode_length)
    kind, compact, ascii_ = unicode_state(u32(head, objects.unicode_state))
    if length < 0 or kind not in _CODECS or (ascii_ and kind != 1):
        return None
    count = min(length, max_chars)
    nbytes = count * kind
    if compact:
        start = addr + (objects.unicode_ascii_size if ascii_ else objects.unicode_compact_size)
    else:
        if len(head) < objects.unicode_compact_size + 8:
            return None
        start = u64(head, objects.unicode_compact_size)  # PyUnicodeObject.data.any
        if not plausible(start, align=1):
            return None
    offset = start - addr
    if compact and offset + nbytes <= len(head):
        data = head[offset : offset + nbytes]
    else:
        found = read_exact(read, start, nbytes) if nbytes else b""
        if found is None:
            return None
        data = found
    text = decode_chars(data, kind)
    return text if count == length else text + "..."


def read_bytes(read: Read, addr: int, objects: ObjectLayout, bytes_type: int | None = None,
               max_bytes: int = MAX_BYTES) -> bytes | None:
    """The contents of the ``bytes`` object at ``addr`` (``ob_size`` at +16, ``ob_sval`` at +32)."""
    if not plausible(addr):
        return None
    head = read(addr, objects.bytes_data + BYTES_FIRST_READ)
    if len(head) < objects.bytes_data:
        return None
    if bytes_type is not None and u64(head, objects.ob_type) != bytes_type:
        return None
    size = i64(head, objects.ob_size)
    if not 0 <= size <= max_bytes:
        return None
    end = objects.bytes_data + size
    if end <= len(head):
        return bytes(head[objects.bytes_data : end])
    return read_exact(read, addr + objects.bytes_data, size)
