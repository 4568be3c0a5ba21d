"""Python-level thread names (``threading.Thread.name``), read from the target's ``threading._active``.

The path (reference section 5): the interpreter's ``sys.modules`` dict -> ``"threading"`` -> the module's
``md_dict`` -> ``"_active"``, a dict ``{ident: Thread}`` where ident is ``threading.get_ident()``, i.e. the
thread state's ``thread_id`` -> each Thread instance's ``_name`` attribute, wherever this version keeps
instance attributes (``dicts.instance_items``).

This is the heaviest remote walk the agent does (one read per dict key compared), so it runs rarely, off the
hot path, and remembers where ``_active`` lives. It only finds threads started through ``threading``: the
main thread is in ``_active`` too, threads made with ``_thread.start_new_thread`` are not. Before
``threading`` is imported there is nothing to find.
"""

from __future__ import annotations

from agents.cpython.dicts import dict_items, instance_items, lookup_str
from agents.cpython.layout import Layout
from agents.cpython.memory import Read, read_exact, read_pointer, u64
from agents.cpython.objects import ObjectFormatter
from agents.cpython.strings import read_str

MAX_THREADS = 4096
MAX_NAME = 256


class ThreadingNames:
    """Reads ``{ident: name}`` for one interpreter layout."""

    def __init__(self, read: Read, layout: Layout, types: dict[str, int]) -> None:
        self.read = read
        self.layout = layout
        self.types = types
        self.formatter = ObjectFormatter(read, layout.objects, types)
        self._active = 0  #: address of the threading._active dict, once found

    def _find_active(self, interpreters: list[int]) -> int:
        o, read, str_type = self.layout.objects, self.read, self.types.get("PyUnicode_Type")
        # the main interpreter's first (the walk lists the newest first): a subinterpreter's threading module
        # names the thread that runs it "MainThread"
        for interp in reversed(interpreters):
            modules = read_pointer(read, interp + self.layout.interpreter.modules)
            if not modules:
                continue
            module = lookup_str(read, dict_items(read, modules, o), "threading", o, str_type)
            namespace = read_pointer(read, module + o.module_dict) if module else None
            active = lookup_str(read, dict_items(read, namespace, o), "_active", o, str_type) if namespace else None
            if active:
                return active
        return 0

    def _is_dict(self, addr: int) -> bool:
        head = read_exact(self.read, addr, 16) if addr else None
        return head is not None and u64(head, self.layout.objects.ob_type) == self.types.get("PyDict_Type")

    def read_names(self, interpreters: list[int]) -> dict[int, str]:
        """``{ident: name}`` of the threads in ``threading._active`` (empty if threading is not imported)."""
        if not self._is_dict(self._active):
            self._active = self._find_active(interpreters)
            if not self._is_dict(self._active):
                self._active = 0
                return {}
        o, read, str_type = self.layout.objects, self.read, self.types.get("PyUnicode_Type")
        names: dict[int, str] = {}
        for key, thread in dict_items(read, self._active, o, limit=MAX_THREADS):
            ident = self.formatter.int_value(key)
            head = read_exact(read, thread, 16)
            if ident is None or head is None:
                continue
            attributes = instance_items(read, thread, u64(head, o.ob_type), o)
            name_ptr = lookup_str(read, attributes, "_name", o, str_type)
            name = read_str(read, name_ptr, o, str_type, MAX_NAME) if name_ptr else None
            if name is not None:
                names[ident] = name
        return names
