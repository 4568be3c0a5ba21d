"""A Python frame's local variables, read from a captured frame for ``nprof dump --locals``.

``nprof dump`` keeps the thread stopped while it reads them, so everything is bounded (``MAX_LOCALS`` per
frame, and ``objects.py``'s per-value budget).

* 3.8-3.10 (``PyFrameObject``): ``f_localsplus`` holds ``co_nlocals`` locals named by ``co_varnames``, then
  one cell per ``co_cellvars`` and ``co_freevars`` name.
* 3.11+ (``_PyInterpreterFrame``): ``localsplus`` holds ``len(co_localsplusnames)`` slots whose kinds
  (``co_localspluskinds``, one byte each; Include/internal/pycore_code.h) say CO_FAST_LOCAL 0x20,
  CO_FAST_CELL 0x40, CO_FAST_FREE 0x80 (3.12+: CO_FAST_HIDDEN 0x10 for inlined comprehension variables).
  A cell variable holds a cell object once ``MAKE_CELL`` ran, and the raw value before.
* 3.14 slots are ``_PyStackRef``s: the low two bits are tags (``FrameLayout.ref_mask``).

A NULL slot is an unbound variable and is left out.
"""

from __future__ import annotations

from agents.cpython.capture import StackCapture
from agents.cpython.layout import Layout
from agents.cpython.memory import Read, i32, i64, plausible, read_exact, read_pointer, u64
from agents.cpython.objects import ObjectFormatter
from agents.cpython.strings import read_bytes, read_str

MAX_LOCALS = 64
CO_FAST_HIDDEN = 0x10  # Include/internal/pycore_code.h (3.12+)


class LocalsReader:
    """Reads the locals of captured frames."""

    def __init__(self, read: Read, layout: Layout, types: dict[str, int]) -> None:
        self.read = read
        self.layout = layout
        self.types = types
        self.formatter = ObjectFormatter(read, layout.objects, types)
        self._cell_type = types.get("PyCell_Type")

    def _tuple_strs(self, addr: int) -> list[str] | None:
        """The str items of a tuple of names (``co_varnames``, ``co_localsplusnames``...)."""
        o = self.layout.objects
        head = read_exact(self.read, addr, o.tuple_items) if plausible(addr) else None
        if head is None or u64(head, o.ob_type) != self.types.get("PyTuple_Type"):
            return None
        count = min(max(i64(head, o.ob_size), 0), MAX_LOCALS)
        raw = read_exact(self.read, addr + o.tuple_items, 8 * count) if count else b""
        if raw is None:
            return None
        names = [read_str(self.read, u64(raw, 8 * i), o, self.types.get("PyUnicode_Type"), 200) for i in range(count)]
        return [name if name is not None else "?" for name in names]

    def _names(self, code: int) -> tuple[list[str], list[bool]] | None:
        """Local names in slot order, and for each whether its slot holds a cell."""
        c = self.layout.code
        if c.varnames is not None:
            head = read_exact(self.read, code, max(c.varnames, c.cellvars or 0, c.freevars or 0) + 8)
            if head is None:
                return None
            nlocals = i32(head, c.nlocals or 0)
            varnames = self._tuple_strs(u64(head, c.varnames)) or []
            if len(varnames) < nlocals:
                return None
            cells = [*(self._tuple_strs(u64(head, c.cellvars or 0)) or []),
                     *(self._tuple_strs(u64(head, c.freevars or 0)) or [])]
            return varnames[:nlocals] + cells, [False] * nlocals + [True] * len(cells)
        names_ptr = read_pointer(self.read, code + (c.localsplusnames or 0))
        kinds_ptr = read_pointer(self.read, code + (c.localspluskinds or 0))
        names = self._tuple_strs(names_ptr or 0)
        kinds = read_bytes(self.read, kinds_ptr or 0, self.layout.objects, self.types.get("PyBytes_Type"))
        if names is None or kinds is None:
            return None
        kinds = kinds[: len(names)]
        return names[: len(kinds)], [bool(k & 0xC0) for k in kinds]

    def frame_locals(self, frame_addr: int, code: int) -> list[tuple[str, str]]:
        """(name, text) of each bound local of the frame at ``frame_addr`` running ``code``."""
        found = self._names(code)
        if found is None:
            return []
        names, is_cell = found
        names, is_cell = names[:MAX_LOCALS], is_cell[:MAX_LOCALS]
        f = self.layout.frame
        raw = read_exact(self.read, frame_addr + f.localsplus, 8 * len(names)) if names else b""
        if raw is None:
            return []
        out = []
        for i, name in enumerate(names):
            value = u64(raw, 8 * i) & f.ref_mask
            if not value:
                continue
            if is_cell[i]:
                value = self._cell_contents(value)
                if not value:
                    continue
            out.append((name, self.formatter.format(value)))
        return out

    def _cell_contents(self, value: int) -> int:
        """A cell's ``ob_ref`` (0 if empty); a value that is not a cell yet (before MAKE_CELL) is itself."""
        o = self.layout.objects
        head = read_exact(self.read, value, o.cell_ref + 8) if plausible(value) else None
        if head is None or self._cell_type is None or u64(head, o.ob_type) != self._cell_type:
            return value
        return u64(head, o.cell_ref)

    def capture_locals(self, capture: StackCapture, indexes: list[int]) -> list[list[tuple[str, str]]]:
        """Locals of the captured frames at ``indexes`` (in ``capture.frames``), in that order (empty for
        shims and unreadable frames)."""
        shims = self.layout.frame.shim_owners
        out: list[list[tuple[str, str]]] = []
        for i in indexes:
            frame_addr, code, _position, flags = capture.frames[i]
            if flags in shims or not code:
                out.append([])
            else:
                out.append(self.frame_locals(frame_addr, code))
        return out

