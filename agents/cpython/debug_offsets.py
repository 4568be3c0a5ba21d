"""``_Py_DebugOffsets`` (3.13+): the struct offsets a 3.13+ interpreter publishes about itself.

``_PyRuntime`` starts with this struct (Include/internal/pycore_runtime.h in 3.13, pycore_debug_offsets.h
in 3.14). Every field is a u64: a struct size, or a byte offset from the start of the named struct. Reading
them from the target means a layout change needs no new table. They are validated as pystack does before
anything is trusted: the cookie, the major.minor, struct sizes below 1 MiB and each field inside its struct.

The field *order* of the struct itself does change between minor versions (3.14 added blocks in the middle),
so the parser branches on the version first. 3.14 follows py-spy's v3_14_0 bindings (reference section 1.4),
checked on Debian sid's 3.14.10 (tests/integration/cpython/test_layout_dwarf.py compares the layout with its
debug file's DWARF).
"""

from __future__ import annotations

import struct
from dataclasses import replace

from agents.cpython.layout import (
    CodeLayout,
    DictFormat,
    FrameLayout,
    FrameStruct,
    InstanceDict,
    InterpreterLayout,
    Layout,
    LineTableFormat,
    LongFormat,
    ObjectLayout,
    RuntimeLayout,
    ThreadLayout,
    code_size,
    frame_size,
)

COOKIE = b"xdebugpy"
#: pystack's sanity bound on any published struct size
MAX_STRUCT_SIZE = 1 << 20
#: Include/cpython/code.h (3.13, 3.14): offsetof(PyCodeObject, co_version), not in _Py_DebugOffsets;
#: re-checked with offsetof on 3.13.0, and in the DWARF of Debian's python3.13-dbg and python3.14-dbg
CO_VERSION = {(3, 13): 92, (3, 14): 92}
#: Include/cpython/object.h: offsetof(PyHeapTypeObject, ht_cached_keys), not in _Py_DebugOffsets; the
#: same DWARF gives 880 for 3.13 and 3.14. Unknown beyond: instances' attributes are then not read
HT_CACHED_KEYS = {(3, 13): 880, (3, 14): 880}
#: bytes of ``_PyRuntime`` to copy: the whole 3.13 (584 bytes) or 3.14 (760 bytes) struct
READ_SIZE = 1024

_COMMON_HEAD = (
    ("runtime_state", ("size", "finalizing", "interpreters_head")),
)
_TAIL = (
    ("pyobject", ("size", "ob_type")),
    ("type_object", ("size", "tp_name", "tp_repr", "tp_flags")),
    ("tuple_object", ("size", "ob_item", "ob_size")),
    ("list_object", ("size", "ob_item", "ob_size")),
)
_OBJECTS = (
    ("dict_object", ("size", "ma_keys", "ma_values")),
    ("float_object", ("size", "ob_fval")),
    ("long_object", ("size", "lv_tag", "ob_digit")),
    ("bytes_object", ("size", "ob_size", "ob_sval")),
    ("unicode_object", ("size", "state", "length", "asciiobject_size")),
    ("gc", ("size", "collecting")),
)
_THREAD = ("thread_state", ("size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id",
                            "datastack_chunk", "status"))

#: Field order per minor version. 3.13: Include/internal/pycore_runtime.h; 3.14: py-spy v3_14_0.rs.
SPECS: dict[tuple[int, int], tuple[tuple[str, tuple[str, ...]], ...]] = {
    (3, 13): (
        *_COMMON_HEAD,
        ("interpreter_state", ("size", "id", "next", "threads_head", "gc", "imports_modules", "sysdict", "builtins",
                               "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled",
                               "gil_runtime_state_locked", "gil_runtime_state_holder")),
        _THREAD,
        ("interpreter_frame", ("size", "previous", "executable", "instr_ptr", "localsplus", "owner")),
        ("code_object", ("size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount",
                         "localsplusnames", "localspluskinds", "co_code_adaptive")),
        *_TAIL,
        *_OBJECTS,
    ),
    (3, 14): (
        *_COMMON_HEAD,
        ("interpreter_state", ("size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules",
                               "sysdict", "builtins", "ceval_gil", "gil_runtime_state",
                               "gil_runtime_state_enabled", "gil_runtime_state_locked",
                               "gil_runtime_state_holder", "code_object_generation", "tlbc_generation")),
        _THREAD,
        ("interpreter_frame", ("size", "previous", "executable", "instr_ptr", "localsplus", "owner",
                               "stackpointer", "tlbc_index")),
        ("code_object", ("size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount",
                         "localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc")),
        *_TAIL,
        ("set_object", ("size", "used", "table", "mask")),
        *_OBJECTS,
    ),
}

#: Widths of fields that are not 8-byte pointers; 0 for flexible arrays, which only need to start in bounds.
_WIDTHS = {
    ("interpreter_frame", "owner"): 1,
    ("interpreter_frame", "localsplus"): 0,
    ("code_object", "firstlineno"): 4,
    ("code_object", "argcount"): 4,
    ("code_object", "co_code_adaptive"): 0,
    ("thread_state", "status"): 4,
    ("long_object", "ob_digit"): 0,
    ("bytes_object", "ob_sval"): 0,
    ("unicode_object", "state"): 4,
    ("interpreter_state", "gil_runtime_state_locked"): 4,
}
#: Offsets relative to another struct than their own block's (checked against that struct's size instead).
_UNCHECKED = {"gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked",
              "gil_runtime_state_holder", "asciiobject_size"}


class DebugOffsetsError(ValueError):
    """The bytes at ``_PyRuntime`` are not a valid ``_Py_DebugOffsets`` for the expected version."""


def parse(data: bytes, expected: tuple[int, int]) -> dict[str, dict[str, int]]:
    """Validate and split the raw struct into ``{block: {field: value}}``; raise DebugOffsetsError."""
    if len(data) < 24 or data[:8] != COOKIE:
        raise DebugOffsetsError("no _Py_DebugOffsets cookie at _PyRuntime")
    version, free_threaded = struct.unpack_from("<QQ", data, 8)
    found = (version >> 24 & 0xFF, version >> 16 & 0xFF)
    if found != expected:
        raise DebugOffsetsError(f"_Py_DebugOffsets says {found[0]}.{found[1]}, expected {expected[0]}.{expected[1]}")
    if free_threaded:
        raise DebugOffsetsError("free-threaded build (its object header differs; not supported)")
    spec = SPECS.get(expected)
    if spec is None:
        raise DebugOffsetsError(f"no _Py_DebugOffsets field order known for {expected[0]}.{expected[1]}")
    at = 24
    blocks: dict[str, dict[str, int]] = {"header": {"version": version}}
    for block, fields in spec:
        if at + 8 * len(fields) > len(data):
            raise DebugOffsetsError(f"_Py_DebugOffsets truncated in {block}")
        values = dict(zip(fields, struct.unpack_from(f"<{len(fields)}Q", data, at)))
        at += 8 * len(fields)
        size = values["size"]
        if not 0 < size < MAX_STRUCT_SIZE:
            raise DebugOffsetsError(f"{block}.size = {size} is implausible")
        for name, value in values.items():
            if name == "size" or name in _UNCHECKED:
                continue
            if value + _WIDTHS.get((block, name), 8) > size:
                raise DebugOffsetsError(f"{block}.{name} = {value} lies outside its struct ({size} bytes)")
        blocks[block] = values
    interp = blocks["interpreter_state"]
    gil_fields = (interp["gil_runtime_state_locked"], interp["gil_runtime_state_holder"])
    if not all(interp["gil_runtime_state"] <= f < interp["size"] for f in gil_fields):
        raise DebugOffsetsError("GIL offsets outside the interpreter state")
    return blocks


def _co_version(version: tuple[int, int], code_size: int) -> int | None:
    """Where ``co_version`` is, for the versions whose offset is known and inside the published code size."""
    at = CO_VERSION.get(version)
    return at if at is not None and code_size >= at + 4 else None


def layout_from_debug_offsets(data: bytes, expected: tuple[int, int]) -> Layout:
    """A ``Layout`` from the target's ``_Py_DebugOffsets`` plus the facts it does not publish."""
    d = parse(data, expected)
    rt, it, ts, fr, co = (d["runtime_state"], d["interpreter_state"], d["thread_state"],
                          d["interpreter_frame"], d["code_object"])
    gil = it["gil_runtime_state"]
    if expected >= (3, 14):
        # Include/internal/pycore_interpframe_structs.h (3.14): FRAME_OWNED_BY_INTERPRETER = 3 (the per-call
        # entry frame) and FRAME_OWNED_BY_CSTACK = 4; both are C-boundary shims. pycore_stackref.h: the low
        # two bits of a _PyStackRef are tags.
        shim_owners, ref_mask = frozenset({3, 4}), ~3
    else:
        # Include/internal/pycore_frame.h (3.13): FRAME_OWNED_BY_CSTACK = 3
        shim_owners, ref_mask = frozenset({3}), ~0
    frame = FrameLayout(FrameStruct.INTERPRETER_FRAME, previous=fr["previous"], code=fr["executable"],
                        instr=fr["instr_ptr"], localsplus=fr["localsplus"], owner=fr["owner"],
                        shim_owners=shim_owners, ref_mask=ref_mask)
    code = CodeLayout(firstlineno=co["firstlineno"], filename=co["filename"], name=co["name"],
                      qualname=co["qualname"], linetable=co["linetable"],
                      linetable_format=LineTableFormat.LOCATIONS,  # Objects/locations.md (3.13)
                      code_adaptive=co["co_code_adaptive"], argcount=co["argcount"],
                      localsplusnames=co["localsplusnames"], localspluskinds=co["localspluskinds"],
                      version=_co_version(expected, co["size"]))
    uni = d["unicode_object"]
    objects = ObjectLayout(
        tuple_items=d["tuple_object"]["ob_item"],
        long_format=LongFormat.LV_TAG,
        long_digits=d["long_object"]["ob_digit"],
        unicode_ascii_size=uni["asciiobject_size"],
        # Include/cpython/unicodeobject.h: PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8
        unicode_compact_size=uni["asciiobject_size"] + 16,
        dict_format=DictFormat.DK_LOG2,
        # Include/internal/pycore_dict.h (3.13): struct _dictvalues {capacity, size, embedded, valid; values[]}
        dict_values_offset=8,
        ht_cached_keys=HT_CACHED_KEYS.get(expected),
        instance_dict=InstanceDict.INLINE_313,  # Include/internal/pycore_object.h (3.13)
        ob_type=d["pyobject"]["ob_type"],
        ob_size=d["tuple_object"]["ob_size"],
        list_items=d["list_object"]["ob_item"],
        float_value=d["float_object"]["ob_fval"],
        bytes_data=d["bytes_object"]["ob_sval"],
        dict_keys=d["dict_object"]["ma_keys"],
        dict_values=d["dict_object"]["ma_values"],
        unicode_length=uni["length"],
        unicode_state=uni["state"],
        tp_name=d["type_object"]["tp_name"],
        tp_flags=d["type_object"]["tp_flags"],
        refcnt_split=expected >= (3, 14),  # Include/object.h (3.14): ob_refcnt, ob_overflow, ob_flags
    )
    return Layout(
        version=expected,
        runtime=RuntimeLayout(interpreters_head=rt["interpreters_head"], tstate_current=None),
        interpreter=InterpreterLayout(next=it["next"], threads_head=it["threads_head"],
                                      modules=it["imports_modules"], ceval_gil=it["ceval_gil"],
                                      gil_last_holder=it["gil_runtime_state_holder"] - gil,
                                      gil_locked=it["gil_runtime_state_locked"] - gil),
        thread=ThreadLayout(next=ts["next"], interp=ts["interp"], thread_id=ts["thread_id"],
                            native_thread_id=ts["native_thread_id"], frame=ts["current_frame"],
                            cframe_current_frame=None, size=ts["size"]),
        frame=replace(frame, size=frame_size(frame)),
        code=replace(code, size=code_size(code)),
        objects=objects,
        source="_Py_DebugOffsets",
    )
