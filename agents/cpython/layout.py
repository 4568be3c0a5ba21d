"""The shape of one CPython version's structs, as the agent needs it: byte offsets and a few enum values.

Everything the agent reads from a target is described here and nowhere else, so that a new version is a new
``Layout`` (a table in ``offsets.py`` for 3.8-3.12, or values read from the target's ``_Py_DebugOffsets`` in
``debug_offsets.py`` for 3.13+) and never a new code path. Offsets are bytes from the start of the named
struct, as ``offsetof`` gives them for a release x86-64 build with the GIL.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass


class FrameStruct(enum.IntEnum):
    """Which struct a thread's frame chain is made of."""

    FRAME_OBJECT = 0  #: 3.8-3.10: heap ``PyFrameObject`` linked by ``f_back``, position in ``f_lasti``
    INTERPRETER_FRAME = 1  #: 3.11+: ``_PyInterpreterFrame`` linked by ``previous``, position in an instr pointer


class LineTableFormat(enum.IntEnum):
    """How ``co_lnotab`` / ``co_linetable`` encodes lines (reference section 3)."""

    LNOTAB = 0  #: 3.8, 3.9: (byte increment, signed line increment) pairs; Objects/lnotab_notes.txt
    LINETABLE_310 = 1  #: 3.10: (byte length, signed line delta, -128 = no line) pairs; 3.10 lnotab_notes.txt
    LOCATIONS = 2  #: 3.11+: variable-length location entries; Objects/locations.md


class LongFormat(enum.IntEnum):
    """How an ``int`` stores its sign and digit count."""

    OB_SIZE = 0  #: 3.8-3.11: signed ``ob_size`` = sign * number of digits (Include/longintrepr.h)
    LV_TAG = 1  #: 3.12+: ``lv_tag`` = ndigits << 3 | sign bits (Include/cpython/longintrepr.h)


class DictFormat(enum.IntEnum):
    """How a dict's keys object is laid out."""

    DK_SIZE = 0  #: 3.8-3.10: ``dk_size`` and ``dk_nentries`` as Py_ssize_t (Objects/dict-common.h)
    DK_LOG2 = 1  #: 3.11+: ``dk_log2_size``/``dk_log2_index_bytes``/``dk_kind`` bytes (pycore_dict.h)


class InstanceDict(enum.IntEnum):
    """Where an instance of a Python class keeps its attributes (reference section 5, "the hard part")."""

    DICTOFFSET = 0  #: 3.8-3.10: a dict pointer at ``obj + tp_dictoffset`` (Include/cpython/object.h)
    #: 3.11: Py_TPFLAGS_MANAGED_DICT types keep a dict pointer at obj - 24 or, while no dict was made,
    #: a values array at obj - 32 whose keys are the type's ``ht_cached_keys`` (Include/internal/pycore_object.h)
    MANAGED_311 = 1
    #: 3.12: one word at obj - 24: a dict, or a values pointer stored minus one so that its low bit is set
    #: (Include/internal/pycore_object.h ``_PyDictOrValues_GetValues``)
    TAGGED_312 = 2
    #: 3.13+: a dict pointer at obj - 24, else (Py_TPFLAGS_INLINE_VALUES) values right after the object
    #: header, at obj + tp_basicsize (pycore_object.h ``_PyObject_InlineValues``)
    INLINE_313 = 3


@dataclass(frozen=True)
class RuntimeLayout:
    """``_PyRuntimeState``."""

    interpreters_head: int
    #: ``gilstate.tstate_current``, the GIL holder's thread state (3.8-3.11); None where it is gone (3.12+)
    tstate_current: int | None


@dataclass(frozen=True)
class InterpreterLayout:
    """``PyInterpreterState`` (``struct _is``)."""

    next: int
    threads_head: int  #: ``tstate_head`` (<=3.10) or ``threads.head`` (3.11+)
    modules: int  #: ``modules`` (<=3.11) or ``imports.modules`` (3.12+): ``sys.modules``
    #: ``ceval.gil``: pointer to the ``struct _gil_runtime_state`` in use (3.12+), None before
    ceval_gil: int | None = None
    gil_last_holder: int | None = None  #: in ``struct _gil_runtime_state`` (3.12+)
    gil_locked: int | None = None  #: in ``struct _gil_runtime_state`` (3.12+)


@dataclass(frozen=True)
class ThreadLayout:
    """``PyThreadState`` (``struct _ts``)."""

    next: int
    interp: int
    thread_id: int  #: ``pthread_self()`` of the thread: equal to its ``fs_base`` on x86-64 glibc
    native_thread_id: int | None  #: the OS tid (3.11+)
    #: where the innermost frame pointer is: ``frame`` (<=3.10), ``cframe`` (3.11, 3.12) or ``current_frame``
    frame: int
    #: 3.11/3.12: offset of ``current_frame`` inside the ``_PyCFrame`` that ``frame`` points to; None otherwise
    cframe_current_frame: int | None
    size: int  #: sizeof(PyThreadState): bounds every field above
    #: 3.11/3.12: offset of ``previous`` (the enclosing eval loop's ``_PyCFrame``) in a ``_PyCFrame``
    cframe_previous: int | None = None
    #: 3.11/3.12: offset of ``root_cframe``, the ``_PyCFrame`` a thread starts with (no eval loop encloses it)
    root_cframe: int | None = None

    @property
    def key(self) -> int:
        """Offset of the field an OS thread's state is found by (reference section 5): ``native_thread_id``
        where there is one (3.11+), else ``thread_id``."""
        return self.native_thread_id if self.native_thread_id is not None else self.thread_id


@dataclass(frozen=True)
class FrameLayout:
    """``PyFrameObject`` (<=3.10) or ``_PyInterpreterFrame`` (3.11+)."""

    kind: FrameStruct
    previous: int  #: ``f_back`` or ``previous``
    code: int  #: ``f_code`` or ``f_executable``
    instr: int  #: ``f_lasti`` (int) or ``prev_instr``/``instr_ptr`` (pointer)
    localsplus: int  #: ``f_localsplus`` or ``localsplus``
    is_entry: int | None = None  #: 3.11 only
    owner: int | None = None  #: 3.11+ (``char owner``)
    #: owner values of C-stack shim frames: FRAME_OWNED_BY_CSTACK (3.12+), and FRAME_OWNED_BY_INTERPRETER (3.14)
    shim_owners: frozenset[int] = frozenset()
    #: mask applied to ``f_executable`` and locals: 3.14's ``_PyStackRef`` tags the low two bits
    ref_mask: int = ~0
    #: bytes per unit of ``f_lasti``: 3.8/3.9 count bytes (1), 3.10 counts 2-byte code units (2)
    lasti_unit: int = 1
    size: int = 0  #: bytes to copy per frame: everything up to the last field used above


#: bytes from ``_co_firsttraceable`` to ``co_code_adaptive`` (``CodeLayout.first_traceable``)
FIRST_TRACEABLE_BEFORE_CODE = 16


@dataclass(frozen=True)
class CodeLayout:
    """``PyCodeObject``."""

    firstlineno: int
    filename: int
    name: int
    qualname: int | None  #: 3.11+
    linetable: int  #: ``co_lnotab`` (3.8/3.9) or ``co_linetable`` (3.10+)
    linetable_format: LineTableFormat
    code_adaptive: int | None  #: 3.11+: the bytecode lives inside the code object from here
    argcount: int
    #: 3.8-3.10 locals: ``co_varnames`` (tuple), ``co_nlocals`` (int), ``co_cellvars``, ``co_freevars``
    varnames: int | None = None
    nlocals: int | None = None
    cellvars: int | None = None
    freevars: int | None = None
    #: 3.11+ locals: ``co_localsplusnames`` (tuple) and ``co_localspluskinds`` (bytes)
    localsplusnames: int | None = None
    localspluskinds: int | None = None
    #: 3.12+ ``co_version`` (uint32): a counter value unique to each code object made (until it wraps)
    version: int | None = None
    size: int = 0  #: bytes to copy as the code object's identity header (see ``code.py``)

    @property
    def first_traceable(self) -> int | None:
        """3.11+: ``_co_firsttraceable`` (int), the index of the code's first RESUME: a frame whose instruction
        is before it is still in its prologue, "incomplete" to CPython (``frames.py``). Include/cpython/code.h
        3.11-3.14 (default build) ends ``_PyCode_DEF`` with ``int _co_firsttraceable; void *co_extra; char
        co_code_adaptive[]`` after a pointer-sized member, so it is 16 bytes before the code (measured here on
        3.11.7, 3.12.1 and 3.13.0)."""
        return None if self.code_adaptive is None else self.code_adaptive - FIRST_TRACEABLE_BEFORE_CODE


@dataclass(frozen=True)
class ObjectLayout:
    """The builtin objects the agent decodes (strings, locals' values, dicts for thread names)."""

    tuple_items: int  #: ``PyTupleObject.ob_item``
    long_format: LongFormat
    long_digits: int  #: ``ob_digit``
    unicode_ascii_size: int  #: sizeof(PyASCIIObject): compact ASCII characters start here
    unicode_compact_size: int  #: sizeof(PyCompactUnicodeObject): other compact characters start here
    dict_format: DictFormat
    dict_values_offset: int  #: where ``values[]`` starts in ``PyDictValues`` (8 in 3.13, else 0)
    ht_cached_keys: int | None  #: ``PyHeapTypeObject.ht_cached_keys``; None where unknown
    instance_dict: InstanceDict
    # Constant in every version 3.8-3.14 (default build); reference section 1.7, "Constant in every version".
    ob_type: int = 8  #: Include/object.h PyObject
    ob_size: int = 16  #: Include/object.h PyVarObject
    list_items: int = 24  #: Include/cpython/listobject.h
    float_value: int = 16  #: Include/cpython/floatobject.h (floatobject.h before 3.11)
    bytes_data: int = 32  #: Include/cpython/bytesobject.h ob_sval
    cell_ref: int = 16  #: Include/cpython/cellobject.h ob_ref
    module_dict: int = 16  #: Objects/moduleobject.c / pycore_moduleobject.h md_dict
    dict_keys: int = 32  #: Include/cpython/dictobject.h ma_keys
    dict_values: int = 40  #: Include/cpython/dictobject.h ma_values
    unicode_length: int = 16  #: Include/cpython/unicodeobject.h PyASCIIObject.length
    unicode_state: int = 32  #: Include/cpython/unicodeobject.h PyASCIIObject.state
    tp_name: int = 24  #: Include/cpython/object.h PyTypeObject
    tp_basicsize: int = 32
    tp_flags: int = 168
    tp_dictoffset: int = 288
    #: 3.14+: the word at the object's start is ``ob_refcnt`` (u32), ``ob_overflow`` (u16) and ``ob_flags``
    #: (u16), Include/object.h: an immortal object has flags set there, so the word as one count is huge
    refcnt_split: bool = False


@dataclass(frozen=True)
class Layout:
    """Everything version-specific about one interpreter build."""

    version: tuple[int, int]
    runtime: RuntimeLayout
    interpreter: InterpreterLayout
    thread: ThreadLayout
    frame: FrameLayout
    code: CodeLayout
    objects: ObjectLayout
    source: str  #: "table" or "_Py_DebugOffsets": where the offsets came from, for diagnostics


def span(*fields: tuple[int | None, int]) -> int:
    """Bytes from a struct's start through the end of its last used field: ``(offset, width)`` pairs, where
    an offset of None (a field this version lacks) is skipped. One copy of this many bytes holds them all."""
    return max(offset + width for offset, width in fields if offset is not None)


def frame_size(frame: FrameLayout) -> int:
    """Bytes to copy per frame for the fields the capture reads."""
    instr_width = 4 if frame.kind is FrameStruct.FRAME_OBJECT else 8
    return span((frame.previous, 8), (frame.code, 8), (frame.instr, instr_width), (frame.is_entry, 1), (frame.owner, 1))


def code_size(code: CodeLayout) -> int:
    """Bytes to copy of a code object to hold ``ob_type`` and every identity field ``code.py`` compares."""
    return span(
        (8, 8),
        (code.firstlineno, 4),
        (code.filename, 8),
        (code.name, 8),
        (code.qualname, 8),
        (code.linetable, 8),
        (code.varnames, 8),
        (code.localsplusnames, 8),
        (code.localspluskinds, 8),
        (code.version, 4),
        (code.first_traceable, 4),
    )


def fields_struct(fields: dict[str, tuple[int, str]]) -> tuple[struct.Struct, list[str]]:
    """One ``struct.Struct`` that unpacks several fields of a struct at once: ``{name: (offset, format)}``
    with single-character little-endian formats ("Q", "i", "B"...). Returns the unpacker and the field names
    in the order of the values it yields (sorted by offset). One ``unpack_from`` of many fields costs about
    what one of a single field does, which matters in the capture loop."""
    fmt, at, names = "<", 0, []
    for name, (offset, code) in sorted(fields.items(), key=lambda item: item[1][0]):
        if offset < at:
            raise ValueError(f"field {name} at {offset} overlaps the previous one")
        fmt += f"{offset - at}x{code}" if offset > at else code
        at = offset + struct.calcsize("<" + code)
        names.append(name)
    return struct.Struct(fmt), names
