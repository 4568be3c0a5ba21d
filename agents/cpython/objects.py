"""Short, bounded text for an object in the target: what ``nprof dump --locals`` prints for a value.

A repr for ``str``, ``int``, ``float``, ``None``, ``bool``, ``bytes`` and small ``tuple``/``list``/``dict`` of
those (nested at most ``MAX_DEPTH`` deep, ``MAX_ITEMS`` items each); ``<type object at 0x...>`` for anything
else. Types are recognised by comparing ``ob_type`` with the addresses of the builtin type objects (exported
in ``.dynsym``), never by name, so a user class named ``int`` is not mistaken for one. Each value gets a
budget of reads, because dump runs while the thread is stopped.

``int`` (Include/longintrepr.h, 3.8-3.11; Include/cpython/longintrepr.h, 3.12+): 30-bit digits stored as
uint32 from ``ob_digit``; 3.8-3.11 keep sign * digit count in ``ob_size``, 3.12+ keep
``lv_tag = ndigits << 3 | sign`` where the low two bits are 0 positive, 1 zero, 2 negative.
"""

from __future__ import annotations

import struct

from agents.cpython.dicts import dict_items
from agents.cpython.layout import LongFormat, ObjectLayout
from agents.cpython.memory import Read, i64, plausible, read_exact, u32, u64
from agents.cpython.strings import read_bytes, read_str

MAX_DEPTH = 2
MAX_ITEMS = 8
MAX_TEXT = 120  #: characters of a str or bytes value shown
MAX_DIGITS = 64  #: ints with more 30-bit digits (about 580 decimal digits) are summarized
READ_BUDGET = 48  #: target reads allowed for one value, nested items included
PYLONG_SHIFT = 30  #: Include/cpython/longintrepr.h: PyLong_SHIFT on 64-bit builds


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


class ObjectFormatter:
    """Formats objects of one target; ``types`` maps builtin type/singleton names to their addresses."""

    def __init__(self, read: Read, objects: ObjectLayout, types: dict[str, int]) -> None:
        self.read = read
        self.objects = objects
        self.types = types
        t = types.get
        self._singletons = {t("_Py_NoneStruct"): "None", t("_Py_TrueStruct"): "True", t("_Py_FalseStruct"): "False"}
        self._singletons.pop(None, None)
        self._handlers = {
            t("PyUnicode_Type"): self._str,
            t("PyLong_Type"): self._int,
            t("PyFloat_Type"): self._float,
            t("PyBytes_Type"): self._bytes,
            t("PyTuple_Type"): self._tuple,
            t("PyList_Type"): self._list,
            t("PyDict_Type"): self._dict,
        }
        self._handlers.pop(None, None)

    def format(self, addr: int) -> str:
        """The text for the object at ``addr``."""
        return self._format(addr, 0, _Budget(READ_BUDGET))

    def _format(self, addr: int, depth: int, budget: _Budget) -> str:
        if addr in self._singletons:
            return self._singletons[addr]
        if not plausible(addr):
            return f"<invalid pointer 0x{addr:x}>"
        if not budget.spend():
            return "..."
        head = read_exact(self.read, addr, 32)
        if head is None:
            return f"<unreadable object at 0x{addr:x}>"
        type_addr = u64(head, self.objects.ob_type)
        handler = self._handlers.get(type_addr)
        if handler is not None:
            text = handler(addr, head, depth, budget)
            if text is not None:
                return text
        return f"<{self.type_name(type_addr)} object at 0x{addr:x}>"

    def type_name(self, type_addr: int) -> str:
        """``tp_name`` of a type object (a C string), or "?"."""
        ptr = read_exact(self.read, type_addr + self.objects.tp_name, 8) if plausible(type_addr) else None
        name = self.read(u64(ptr, 0), 80) if ptr is not None and plausible(u64(ptr, 0), align=1) else b""
        end = name.find(b"\0")
        return name[:end].decode("utf-8", "replace") if end > 0 else "?"

    def _str(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        text = read_str(self.read, addr, self.objects, max_chars=MAX_TEXT)
        return None if text is None else repr(text)

    def _bytes(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        size = i64(head, self.objects.ob_size)
        data = read_bytes(self.read, addr, self.objects, max_bytes=max(size, 0)) if 0 <= size <= MAX_TEXT else None
        if data is None:
            return f"<bytes of length {size}>" if size >= 0 else None
        return repr(data)

    def _float(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        return repr(struct.unpack_from("<d", head, self.objects.float_value)[0])

    def int_value(self, addr: int) -> int | None:
        """The value of the ``int`` at ``addr`` (None if it is not a readable int or too long)."""
        head = read_exact(self.read, addr, 32) if plausible(addr) else None
        if head is None or u64(head, self.objects.ob_type) != self.types.get("PyLong_Type"):
            return None
        text = self._int(addr, head, 0, _Budget(1))
        return int(text) if text is not None and not text.startswith("<") else None

    def _int(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        o = self.objects
        if o.long_format is LongFormat.OB_SIZE:
            size = i64(head, o.ob_size)
            ndigits, negative = abs(size), size < 0
        else:
            tag = u64(head, o.ob_size)  # lv_tag sits where ob_size was
            ndigits, negative = tag >> 3, tag & 3 == 2
        if ndigits > MAX_DIGITS:
            return f"<int of {ndigits} digits>"
        raw = read_exact(self.read, addr + o.long_digits, 4 * ndigits) if ndigits else b""
        if raw is None:
            return None
        value = 0
        for i in range(ndigits):
            value |= u32(raw, 4 * i) << (PYLONG_SHIFT * i)
        return str(-value if negative else value)

    def _items(self, addr: int, count: int, array: int, depth: int, budget: _Budget) -> list[str] | None:
        if not 0 <= count <= 1 << 30:
            return None
        shown = min(count, MAX_ITEMS)
        raw = read_exact(self.read, array, 8 * shown) if shown else b""
        if raw is None:
            return None
        texts = [self._format(u64(raw, 8 * i), depth + 1, budget) for i in range(shown)]
        if count > shown:
            texts.append(f"... {count - shown} more")
        return texts

    def _tuple(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        count = i64(head, self.objects.ob_size)
        if depth >= MAX_DEPTH:
            return f"<tuple of {count} items>"
        items = self._items(addr, count, addr + self.objects.tuple_items, depth, budget)
        if items is None:
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    def _list(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        count = i64(head, self.objects.ob_size)
        if depth >= MAX_DEPTH:
            return f"<list of {count} items>"
        array = read_exact(self.read, addr + self.objects.list_items, 8)
        items = self._items(addr, count, u64(array, 0), depth, budget) if array is not None else None
        return None if items is None else "[" + ", ".join(items) + "]"

    def _dict(self, addr: int, head: bytes, depth: int, budget: _Budget) -> str | None:
        used = i64(head, 16)  # PyDictObject.ma_used (Include/cpython/dictobject.h, 3.8-3.14)
        if depth >= MAX_DEPTH:
            return f"<dict of {used} items>"
        pairs = dict_items(self.read, addr, self.objects, limit=MAX_ITEMS * 4)
        texts = [f"{self._format(k, depth + 1, budget)}: {self._format(v, depth + 1, budget)}"
                 for k, v in pairs[:MAX_ITEMS]]
        if used > len(texts):
            texts.append(f"... {used - len(texts)} more")
        return "{" + ", ".join(texts) + "}"
