"""Dicts read from the target: the items of a ``dict``, of a shared-keys values array, and of an instance.

Used off the hot path only (``nprof dump --locals`` and the thread-name refresh). Layouts:

* 3.8-3.10 (Objects/dict-common.h): keys object = ``dk_refcnt, dk_size, dk_lookup, dk_usable, dk_nentries``
  (8 bytes each), then ``dk_indices`` at 40 whose entries are 1/2/4/8 bytes as ``dk_size`` is <= 0xff,
  0xffff, 0xffffffff or more, then the entries ``{hash, key, value}``.
* 3.11+ (Include/internal/pycore_dict.h): ``dk_refcnt``, then bytes ``dk_log2_size`` at 8,
  ``dk_log2_index_bytes`` at 9, ``dk_kind`` at 10, ``dk_nentries`` at 24, ``dk_indices`` at 32 taking
  ``1 << dk_log2_index_bytes`` bytes; entries are ``{hash, key, value}`` for DICT_KEYS_GENERAL (0) and
  ``{key, value}`` for the unicode kinds (1, 2).
* A split table (``ma_values`` != NULL) keeps the values apart, ``values[i]`` for entry i; 3.13's
  ``PyDictValues`` puts 8 bytes of header before them (``ObjectLayout.dict_values_offset``).
"""

from __future__ import annotations

from agents.cpython.layout import DictFormat, InstanceDict, ObjectLayout
from agents.cpython.memory import Read, i64, plausible, read_exact, read_pointer, read_u64, u64
from agents.cpython.strings import read_str

#: most entries read from one dict (interp->modules of a big application has a few thousand)
MAX_ENTRIES = 1 << 14

# Include/object.h (3.11+): type flags that move an instance's attributes out of a __dict__ slot
Py_TPFLAGS_INLINE_VALUES = 1 << 2  # 3.13+
Py_TPFLAGS_MANAGED_DICT = 1 << 4  # 3.11+


def _keys_header(read: Read, keys: int, objects: ObjectLayout) -> tuple[int, int, int] | None:
    """(first entry offset, entry size, number of entries) of a keys object."""
    if objects.dict_format is DictFormat.DK_SIZE:
        head = read_exact(read, keys, 40)
        if head is None:
            return None
        size, nentries = i64(head, 8), i64(head, 32)
        if not 0 < size <= 1 << 30:
            return None
        width = 1 if size <= 0xFF else 2 if size <= 0xFFFF else 4 if size <= 0xFFFFFFFF else 8
        return 40 + size * width, 24, nentries
    head = read_exact(read, keys, 32)
    if head is None:
        return None
    log2_index_bytes, kind, nentries = head[9], head[10], i64(head, 24)
    if log2_index_bytes > 32:
        return None
    return 32 + (1 << log2_index_bytes), 24 if kind == 0 else 16, nentries


def keys_items(read: Read, keys: int, values: int, objects: ObjectLayout,
               limit: int = MAX_ENTRIES) -> list[tuple[int, int]]:
    """(key, value) object pointers of a keys object, with its split ``values`` array if non-zero."""
    header = _keys_header(read, keys, objects) if plausible(keys) else None
    if header is None:
        return []
    start, entry_size, nentries = header
    count = max(0, min(nentries, limit))
    if not count:
        return []
    raw = read_exact(read, keys + start, count * entry_size)
    if raw is None:
        return []
    key_at = 8 if entry_size == 24 else 0
    pairs = [(u64(raw, i * entry_size + key_at), u64(raw, i * entry_size + key_at + 8)) for i in range(count)]
    if values:
        vals = read_exact(read, values + objects.dict_values_offset, 8 * count)
        if vals is None:
            return []
        pairs = [(key, u64(vals, 8 * i)) for i, (key, _) in enumerate(pairs)]
    return [(key, value) for key, value in pairs if key and value]


def dict_items(read: Read, addr: int, objects: ObjectLayout, limit: int = MAX_ENTRIES) -> list[tuple[int, int]]:
    """(key, value) pointers of the dict at ``addr`` (empty if unreadable)."""
    if not plausible(addr):
        return []
    head = read_exact(read, addr, objects.dict_values + 8)
    if head is None:
        return []
    return keys_items(read, u64(head, objects.dict_keys), u64(head, objects.dict_values), objects, limit)


def lookup_str(read: Read, items: list[tuple[int, int]], name: str, objects: ObjectLayout,
               str_type: int | None) -> int | None:
    """The value whose key is the str ``name`` (compared by reading each key: hashes are randomized)."""
    for key, value in items:
        if read_str(read, key, objects, str_type, max_chars=len(name) + 1) == name:
            return value
    return None


def instance_items(read: Read, obj: int, type_addr: int, objects: ObjectLayout) -> list[tuple[int, int]]:
    """The attributes of a Python class instance, wherever this version keeps them."""
    head = read_exact(read, type_addr, max(objects.tp_dictoffset, objects.tp_flags) + 8)
    if head is None:
        return []
    flags = u64(head, objects.tp_flags)
    style = objects.instance_dict
    if style is InstanceDict.DICTOFFSET or not flags & Py_TPFLAGS_MANAGED_DICT:
        offset = i64(head, objects.tp_dictoffset)
        if offset <= 0:
            return []  # no __dict__, or a variable-size object (negative offsets are not needed here)
        return dict_items(read, read_pointer(read, obj + offset) or 0, objects)
    cached = objects.ht_cached_keys
    keys = (read_pointer(read, type_addr + cached) or 0) if cached is not None else 0
    word = read_u64(read, obj - 24) or 0  # MANAGED_DICT_OFFSET = -3 pointers in 3.11-3.13
    if style is InstanceDict.MANAGED_311:
        if word:
            return dict_items(read, word, objects)
        return keys_items(read, keys, read_u64(read, obj - 32) or 0, objects)
    if style is InstanceDict.TAGGED_312:
        if word & 1:  # _PyDictOrValues_SetValues stores the values pointer minus one
            return keys_items(read, keys, word + 1, objects)
        return dict_items(read, word, objects)
    if word:
        return dict_items(read, word, objects)
    if flags & Py_TPFLAGS_INLINE_VALUES:
        return keys_items(read, keys, obj + u64(head, objects.tp_basicsize), objects)
    return []

