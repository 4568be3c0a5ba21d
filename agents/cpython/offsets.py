"""Struct offsets of CPython 3.8-3.12, one table per minor version (x86-64, release build, GIL).

Each number is ``offsetof`` on that version's installed headers (pyenv 3.8.18, 3.9.18, 3.10.13, 3.11.7,
3.12.1, compiled with ``Py_BUILD_CORE``), as ``../shared/reference/cpython-internals.md`` section 1.7 lists
them and re-checked for this module with the same kind of probe. The comment on each entry names the header
that defines the field. One layout per minor version holds across patch releases (py-spy and pystack rely on
the same). 3.13+ take their offsets from the target itself (``debug_offsets.py``); ``owner`` values, the
line-table format and the other facts the debug offsets do not publish are cited where they are used.
"""

from __future__ import annotations

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

#: Include/internal/pycore_frame.h (3.12, 3.13): ``FRAME_OWNED_BY_CSTACK = 3``, the C-stack entry (shim) frame
FRAME_OWNED_BY_CSTACK = 3


def _sized(layout: Layout) -> Layout:
    frame = replace(layout.frame, size=frame_size(layout.frame))
    return replace(layout, frame=frame, code=replace(layout.code, size=code_size(layout.code)))


def _v3_8() -> Layout:
    return Layout(
        version=(3, 8),
        # Include/internal/pycore_pystate.h: struct pyruntimestate
        runtime=RuntimeLayout(interpreters_head=32, tstate_current=1368),
        # Include/internal/pycore_pystate.h: struct _is (next, tstate_head, modules)
        interpreter=InterpreterLayout(next=0, threads_head=8, modules=56),
        # Include/cpython/pystate.h: struct _ts (prev 0, next, interp, frame, thread_id)
        thread=ThreadLayout(next=8, interp=16, thread_id=176, native_thread_id=None, frame=24,
                            cframe_current_frame=None, size=264),
        # Include/frameobject.h: PyFrameObject (f_back, f_code, f_lasti, f_localsplus)
        frame=FrameLayout(FrameStruct.FRAME_OBJECT, previous=24, code=32, instr=104, localsplus=360, lasti_unit=1),
        # Include/code.h: PyCodeObject
        code=CodeLayout(firstlineno=40, filename=104, name=112, qualname=None, linetable=120,
                        linetable_format=LineTableFormat.LNOTAB, code_adaptive=None, argcount=16,
                        varnames=72, nlocals=28, cellvars=88, freevars=80),
        objects=ObjectLayout(
            tuple_items=24,  # Include/cpython/tupleobject.h
            long_format=LongFormat.OB_SIZE, long_digits=24,  # Include/longintrepr.h
            unicode_ascii_size=48, unicode_compact_size=72,  # Include/cpython/unicodeobject.h
            dict_format=DictFormat.DK_SIZE, dict_values_offset=0,  # Objects/dict-common.h
            ht_cached_keys=872,  # Include/cpython/object.h: PyHeapTypeObject
            instance_dict=InstanceDict.DICTOFFSET,
        ),
        source="table",
    )


def _v3_9() -> Layout:
    v = _v3_8()
    return replace(
        v,
        version=(3, 9),
        # Include/internal/pycore_runtime.h: GC state moved to the interpreter, the runtime shrank
        runtime=RuntimeLayout(interpreters_head=32, tstate_current=568),
        # Include/internal/pycore_interp.h: struct _is
        interpreter=InterpreterLayout(next=0, threads_head=8, modules=856),
        # Include/cpython/pystate.h and Include/cpython/frameobject.h: unchanged from 3.8
        objects=replace(v.objects, ht_cached_keys=864),  # Include/cpython/object.h: PyHeapTypeObject
    )


def _v3_10() -> Layout:
    v = _v3_9()
    return replace(
        v,
        version=(3, 10),
        # Include/cpython/pystate.h: struct _ts grew (cframe at 48 holds only use_tracing in 3.10)
        thread=replace(v.thread, size=280),
        # Include/cpython/frameobject.h: f_lasti moved and now counts 2-byte code units
        frame=FrameLayout(FrameStruct.FRAME_OBJECT, previous=24, code=32, instr=96, localsplus=352, lasti_unit=2),
        # Include/cpython/code.h: co_lnotab became co_linetable at the same offset
        code=replace(v.code, linetable_format=LineTableFormat.LINETABLE_310),
        objects=replace(v.objects, ht_cached_keys=872),  # Include/cpython/object.h: PyHeapTypeObject
    )


def _v3_11() -> Layout:
    return Layout(
        version=(3, 11),
        # Include/internal/pycore_runtime.h: struct pyruntimestate
        runtime=RuntimeLayout(interpreters_head=40, tstate_current=576),
        # Include/internal/pycore_interp.h: struct _is (threads.head, modules)
        interpreter=InterpreterLayout(next=0, threads_head=16, modules=888),
        # Include/cpython/pystate.h: struct _ts (cframe, thread_id, native_thread_id, root_cframe: its last
        # member); _PyCFrame is {uint8_t use_tracing; current_frame; previous}
        thread=ThreadLayout(next=8, interp=16, thread_id=152, native_thread_id=160, frame=56,
                            cframe_current_frame=8, size=360, cframe_previous=16, root_cframe=336),
        # Include/internal/pycore_frame.h: _PyInterpreterFrame (f_code, previous, prev_instr, is_entry, owner)
        frame=FrameLayout(FrameStruct.INTERPRETER_FRAME, previous=48, code=32, instr=56, localsplus=72,
                          is_entry=68, owner=69),
        # Include/cpython/code.h: PyCodeObject (_PyCode_DEF)
        code=CodeLayout(firstlineno=72, filename=112, name=120, qualname=128, linetable=136,
                        linetable_format=LineTableFormat.LOCATIONS, code_adaptive=184, argcount=56,
                        localsplusnames=96, localspluskinds=104),
        objects=ObjectLayout(
            tuple_items=24,  # Include/cpython/tupleobject.h
            long_format=LongFormat.OB_SIZE, long_digits=24,  # Include/cpython/longintrepr.h
            unicode_ascii_size=48, unicode_compact_size=72,  # Include/cpython/unicodeobject.h
            dict_format=DictFormat.DK_LOG2, dict_values_offset=0,  # Include/internal/pycore_dict.h
            ht_cached_keys=872,  # Include/cpython/object.h: PyHeapTypeObject
            instance_dict=InstanceDict.MANAGED_311,  # Include/internal/pycore_object.h
        ),
        source="table",
    )


def _v3_12() -> Layout:
    v = _v3_11()
    return replace(
        v,
        version=(3, 12),
        # Include/internal/pycore_runtime.h: gilstate.tstate_current is gone (the holder is read from the GIL)
        runtime=RuntimeLayout(interpreters_head=40, tstate_current=None),
        # Include/internal/pycore_interp.h: struct _is reordered; ceval.gil points at the GIL in use
        # (Include/internal/pycore_ceval_state.h), last_holder/locked in Include/internal/pycore_gil.h
        interpreter=InterpreterLayout(next=0, threads_head=72, modules=944, ceval_gil=384,
                                      gil_last_holder=8, gil_locked=16),
        # Include/cpython/pystate.h: struct _ts (root_cframe still last); _PyCFrame is {current_frame;
        # previous} (use_tracing gone)
        thread=ThreadLayout(next=8, interp=16, thread_id=136, native_thread_id=144, frame=56,
                            cframe_current_frame=0, size=288, cframe_previous=8, root_cframe=272),
        # Include/internal/pycore_frame.h: f_code first, owner after return_offset, shims owned by the C stack
        frame=FrameLayout(FrameStruct.INTERPRETER_FRAME, previous=8, code=0, instr=56, localsplus=72,
                          owner=70, shim_owners=frozenset({FRAME_OWNED_BY_CSTACK})),
        # Include/cpython/code.h: co_firstlineno and co_argcount moved, co_code_adaptive grew by 8, and
        # co_version (a per-code-object counter value) appeared
        code=replace(v.code, firstlineno=68, argcount=52, code_adaptive=192, version=92),
        objects=replace(
            v.objects,
            long_format=LongFormat.LV_TAG,  # Include/cpython/longintrepr.h: _PyLongValue.lv_tag
            unicode_ascii_size=40, unicode_compact_size=56,  # Include/cpython/unicodeobject.h: wstr removed
            ht_cached_keys=880,  # Include/cpython/object.h: PyHeapTypeObject
            instance_dict=InstanceDict.TAGGED_312,  # Include/internal/pycore_object.h: PyDictOrValues
        ),
    )


TABLES: dict[tuple[int, int], Layout] = {
    layout.version: layout for layout in map(_sized, (_v3_8(), _v3_9(), _v3_10(), _v3_11(), _v3_12()))
}


def table_layout(version: tuple[int, int]) -> Layout | None:
    """The hand-maintained layout of a 3.8-3.12 minor version, or None."""
    return TABLES.get(version)
