"""The 3.8-3.12 offset tables (``agents/cpython/offsets.py``) against the DWARF of the installed interpreters,
and the 3.13 and 3.14 layouts made from ``_Py_DebugOffsets`` against the DWARF of Debian sid's debug packages.

The tables are hand-copied numbers, and a wrong one does not raise: the agent reads the wrong word of every
target and Python frames go missing or come out garbled. gdb's ``ptype/o`` prints the layout the compiler chose
for the very libpython these integration tests run, so every table entry that names a struct member is compared
with it here. 3.13+ take most of their offsets from the target's ``_Py_DebugOffsets`` (parsed in
tests/unit/test_cpython_debug_offsets.py), and the rest from facts of their headers, which a wrong one here
would show (``ht_cached_keys`` was unknown for 3.14 and every thread went unnamed there): the layout made from
the stripped sid binary's own ``_Py_DebugOffsets`` is compared with its debug file's DWARF.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from agents.cpython import debug_offsets
from agents.cpython.debug_offsets import layout_from_debug_offsets
from agents.cpython.offsets import table_layout
from profiler.binary.elf import ElfFile
from tests.targets.python.interpreters import PYENV_ROOT, SID_ROOT, pyenv_interpreter

VERSIONS = [(3, 8), (3, 9), (3, 10), (3, 11), (3, 12)]
SECTIONS = ("runtime", "interpreter", "thread", "frame", "code", "objects")
#: every version has it: gdb not knowing it means the library carries no DWARF (a stripped or distro build)
ANCHOR = "struct _ts"
#: printed by gdb's ``echo`` before each ``ptype/o``, to tell which output (or error: none) answers which type
MARK = "@@@nprof-ptype "

# Where each number of a Layout section is in C, per version family. "T::m.n" is offsetof(T, m.n) as gdb prints
# it (members of a struct or union declared inline carry offsets from T's start); "sizeof(T)" is T's total size;
# "A + B" adds offsets, for a member of a typedef'd struct member, which gdb prints as one opaque member. A field
# the table leaves None must name a member gdb does not find (the version lacks it), so a table that forgot a
# field fails too (each member named only to be absent is found, with its number, in another family, so a
# misspelt name does not pass). Int fields that are not member offsets are in NOT_MEMBERS instead.

_OBJECTS = {  # ObjectLayout, every version; its defaults ("constant in every version") are checked in each
    "tuple_items": "PyTupleObject::ob_item",
    "unicode_ascii_size": "sizeof(PyASCIIObject)",
    "unicode_compact_size": "sizeof(PyCompactUnicodeObject)",
    "ht_cached_keys": "PyHeapTypeObject::ht_cached_keys",
    "ob_type": "PyObject::ob_type",
    "ob_size": "PyVarObject::ob_size",
    "list_items": "PyListObject::ob_item",
    "float_value": "PyFloatObject::ob_fval",
    "bytes_data": "PyBytesObject::ob_sval",
    "cell_ref": "PyCellObject::ob_ref",
    "module_dict": "PyModuleObject::md_dict",
    "dict_keys": "PyDictObject::ma_keys",
    "dict_values": "PyDictObject::ma_values",
    "unicode_length": "PyASCIIObject::length",
    "unicode_state": "PyASCIIObject::state",
    "tp_name": "PyTypeObject::tp_name",
    "tp_basicsize": "PyTypeObject::tp_basicsize",
    "tp_flags": "PyTypeObject::tp_flags",
    "tp_dictoffset": "PyTypeObject::tp_dictoffset",
}

# 3.8-3.10: PyFrameObject frames linked by f_back, the thread state's own ``frame`` pointer, co_varnames locals
_V3_8 = {
    "runtime": {
        "interpreters_head": "_PyRuntimeState::interpreters.head",
        "tstate_current": "_PyRuntimeState::gilstate.tstate_current",
    },
    "interpreter": {
        "next": "struct _is::next",
        "threads_head": "struct _is::tstate_head",
        "modules": "struct _is::modules",
        "ceval_gil": "struct _is::ceval.gil",  # absent: the GIL is in the runtime until 3.12
    },
    "thread": {
        "next": "struct _ts::next",
        "interp": "struct _ts::interp",
        "thread_id": "struct _ts::thread_id",
        "native_thread_id": "struct _ts::native_thread_id",  # absent until 3.11
        "frame": "struct _ts::frame",
        "size": "sizeof(struct _ts)",
    },
    "frame": {
        "previous": "struct _frame::f_back",
        "code": "struct _frame::f_code",
        "instr": "struct _frame::f_lasti",
        "localsplus": "struct _frame::f_localsplus",
    },
    "code": {
        "firstlineno": "PyCodeObject::co_firstlineno",
        "filename": "PyCodeObject::co_filename",
        "name": "PyCodeObject::co_name",
        "qualname": "PyCodeObject::co_qualname",  # absent until 3.11
        "linetable": "PyCodeObject::co_lnotab",
        "code_adaptive": "PyCodeObject::co_code_adaptive",  # absent until 3.11
        "argcount": "PyCodeObject::co_argcount",
        "varnames": "PyCodeObject::co_varnames",
        "nlocals": "PyCodeObject::co_nlocals",
        "cellvars": "PyCodeObject::co_cellvars",
        "freevars": "PyCodeObject::co_freevars",
        "localsplusnames": "PyCodeObject::co_localsplusnames",  # absent until 3.11
        "version": "PyCodeObject::co_version",  # absent until 3.12
    },
    "objects": {**_OBJECTS, "long_digits": "struct _longobject::ob_digit"},
}
# 3.10: co_lnotab became co_linetable (the thread state's new ``cframe`` and ``root_cframe`` are not used by
# the 3.10 table, which walks ``frame``)
_V3_10 = {**_V3_8, "code": {**_V3_8["code"], "linetable": "PyCodeObject::co_linetable"}}
# 3.11: _PyInterpreterFrame chain reached through the thread state's ``cframe`` (a _PyCFrame), localsplus names
_V3_11 = {
    "runtime": _V3_8["runtime"],
    "interpreter": {**_V3_8["interpreter"], "threads_head": "struct _is::threads.head"},
    "thread": {
        **_V3_8["thread"],  # native_thread_id is there now
        "frame": "struct _ts::cframe",
        "cframe_current_frame": "struct _PyCFrame::current_frame",
        "cframe_previous": "struct _PyCFrame::previous",
        "root_cframe": "struct _ts::root_cframe",
    },
    "frame": {
        "previous": "struct _PyInterpreterFrame::previous",
        "code": "struct _PyInterpreterFrame::f_code",
        "instr": "struct _PyInterpreterFrame::prev_instr",
        "localsplus": "struct _PyInterpreterFrame::localsplus",
        "is_entry": "struct _PyInterpreterFrame::is_entry",  # absent in 3.12
        "owner": "struct _PyInterpreterFrame::owner",
    },
    "code": {
        "firstlineno": "PyCodeObject::co_firstlineno",
        "filename": "PyCodeObject::co_filename",
        "name": "PyCodeObject::co_name",
        "qualname": "PyCodeObject::co_qualname",
        "linetable": "PyCodeObject::co_linetable",
        "code_adaptive": "PyCodeObject::co_code_adaptive",
        "argcount": "PyCodeObject::co_argcount",
        "varnames": "PyCodeObject::co_varnames",  # absent: computed from co_localsplusnames since 3.11
        "localsplusnames": "PyCodeObject::co_localsplusnames",
        "localspluskinds": "PyCodeObject::co_localspluskinds",
        "version": "PyCodeObject::co_version",  # absent until 3.12
    },
    "objects": {
        **_OBJECTS,
        "long_digits": "struct _longobject::ob_digit",
        "dict_values_offset": "struct _dictvalues::values",
    },
}
# 3.12: sys.modules under ``imports``, the GIL per interpreter (``ceval.gil`` points at it), ob_digit inside the
# typedef'd ``long_value``
_V3_12 = {
    **_V3_11,
    "interpreter": {
        **_V3_11["interpreter"],
        "modules": "struct _is::imports.modules",
        "gil_last_holder": "struct _gil_runtime_state::last_holder",
        "gil_locked": "struct _gil_runtime_state::locked",
    },
    "objects": {**_V3_11["objects"], "long_digits": "struct _longobject::long_value + _PyLongValue::ob_digit"},
}
# 3.13: no _PyCFrame; the thread state's ``current_frame``, frames running ``f_executable`` from ``instr_ptr``
_V3_13 = {
    "runtime": _V3_8["runtime"],
    "interpreter": _V3_12["interpreter"],
    "thread": {
        **{field: spec for field, spec in _V3_11["thread"].items() if "cframe" not in field},
        "frame": "struct _ts::current_frame",
    },
    "frame": {
        **_V3_11["frame"],
        "code": "struct _PyInterpreterFrame::f_executable",
        "instr": "struct _PyInterpreterFrame::instr_ptr",
    },
    "code": _V3_11["code"],
    "objects": _V3_12["objects"],
}
FAMILIES: dict[tuple[int, int], dict[str, dict[str, str]]] = {
    (3, 8): _V3_8, (3, 9): _V3_8, (3, 10): _V3_10, (3, 11): _V3_11, (3, 12): _V3_12, (3, 13): _V3_13,
    (3, 14): _V3_13,
}  # fmt: skip

#: int fields that are no struct member's offset, so DWARF cannot check them (enums and sets are left out anyway)
NOT_MEMBERS = {
    ("frame", "size"): "bytes to copy per frame, computed by layout.frame_size() from the checked fields",
    ("code", "size"): "bytes to copy per code object, computed by layout.code_size() from the checked fields",
    ("frame", "lasti_unit"): "bytes per f_lasti unit: how the eval loop counts, not where anything is",
    ("frame", "ref_mask"): "a _PyStackRef tag mask (3.14), not an offset",
    ("objects", "dict_values_offset"): "3.8-3.10 have no PyDictValues struct: ma_values points at the array",
}
#: mapped fields the dataclass may not have yet (root_cframe came with the root _PyCFrame walk)
OPTIONAL_FIELDS = {("thread", "root_cframe")}


@dataclass(frozen=True)
class Struct:
    """One type as gdb's ``ptype/o`` prints it."""

    size: int
    members: dict[str, int]  #: dotted member path -> offset from the start of the type


_MEMBER = re.compile(r"^/\*\s*(?:(?P<offset>\d+)(?::\s*\d+)?\s*\|)?\s*(?P<size>\d+)\s*\*/\s*(?P<decl>.*?)\s*$")
_TOTAL = re.compile(r"/\*\s*total size \(bytes\):\s*(?P<size>\d+)\s*\*/")
_CLOSE = re.compile(r"^\s*\}\s*(?P<name>\w*)\s*(?P<array>(?:\[\d*\])*)\s*;?\s*$")


@dataclass
class _Open:
    """A struct or union whose members are being read: the type itself or one declared inline in it."""

    offset: int
    size: int
    members: dict[str, int] = dataclasses.field(default_factory=dict)


def _declared_name(decl: str) -> str:
    """The member name of one C declaration as gdb prints it: ``PyObject *localsplus[1];``,
    ``void (*on_delete)(void *);``, ``unsigned int kind : 3;``, ``enum {A, B} initialized;``."""
    decl = re.sub(r"\s*:\s*\d+\s*$", "", decl.strip().rstrip(";"))  # a bit-field's width
    function_pointer = re.search(r"\(\s*\*+\s*(\w+)[^()]*\)\s*\(", decl)
    if function_pointer:
        return function_pointer.group(1)
    return re.findall(r"\w+", re.sub(r"(?:\s*\[[^\]]*\])+$", "", decl))[-1]


def parse_ptype(text: str) -> Struct | None:
    """The members of one ``ptype/o`` output, or None when it printed no type (gdb knows no such type).

    gdb prints the members of a struct or union declared inline right there, between the parent's members,
    with offsets from the outermost type's start; they become dotted paths ("interpreters.head"), and those
    of an anonymous one paths of the parent (as C names them). Members of a union have no offset of their
    own: they are at the union's. Inside an array of structs gdb restarts offsets at the element, so those
    members are left out (only the array member itself is kept)."""
    stack: list[_Open] = []
    size = None
    for line in text.splitlines():
        if not stack:
            if "type = " in line and line.rstrip().endswith("{"):
                stack.append(_Open(0, 0))
            continue
        member, total, close = _MEMBER.match(line.strip()), _TOTAL.search(line), _CLOSE.match(line)
        if member:
            offset = int(member["offset"]) if member["offset"] is not None else stack[-1].offset
            if member["decl"].endswith("{"):
                stack.append(_Open(offset, int(member["size"])))
            else:
                stack[-1].members[_declared_name(member["decl"])] = offset
        elif total and len(stack) == 1:
            size = int(total["size"])
        elif close:
            if len(stack) == 1:
                break
            inner = stack.pop()
            outer = stack[-1]
            if close["name"]:
                outer.members[close["name"]] = inner.offset
            if close["array"]:
                continue
            for path, offset in inner.members.items():
                # offsets from the outermost type: guard against a gdb that prints them from the inner one
                assert inner.offset <= offset <= inner.offset + inner.size, f"{path} at {offset}: relative offsets?"
                outer.members[f"{close['name']}.{path}" if close["name"] else path] = offset
    if not stack or size is None:
        return None
    return Struct(size, stack[0].members)


def _types_of(family: dict[str, dict[str, str]]) -> list[str]:
    """Every type the specs of one family name, in a stable order: what one gdb run must print."""
    found = {ANCHOR}
    for specs in family.values():
        for spec in specs.values():
            for term in spec.split(" + "):
                sizeof = re.fullmatch(r"sizeof\((.+)\)", term)
                found.add(sizeof[1] if sizeof else term.split("::")[0])
    return sorted(found)


def _libpython(version: tuple[int, int]) -> str:
    """The libpython of pyenv's ``version``, or skip saying what is missing."""
    interp = pyenv_interpreter(version)
    if interp is None:
        pytest.skip(f"no CPython {version[0]}.{version[1]} under {PYENV_ROOT}/versions")
    prefix = os.path.dirname(os.path.dirname(interp.path))
    lib = os.path.join(prefix, "lib", f"libpython{version[0]}.{version[1]}.so.1.0")
    if not os.path.exists(lib):
        pytest.skip(f"{interp.path} has no {lib} (not a --enable-shared build)")
    return lib


def _gdb_command(lib: str, types: list[str]) -> list[str]:
    """One gdb run printing every type: loading a libpython's DWARF is most of a run's second."""
    command = ["gdb", "-batch", "-nx", "-ex", "set max-value-size unlimited", "-ex", "set width unlimited"]
    for name in types:
        command += ["-ex", f"echo {MARK}{name}\\n", "-ex", f"ptype/o {name}"]
    return [*command, lib]


def _sid_debug_file(version: tuple[int, int]) -> tuple[str, str]:
    """Debian sid's stripped ``python3.X`` and its debug file (scripts/setup-tests.sh), or skip."""
    binary = f"{SID_ROOT}/usr/bin/python{version[0]}.{version[1]}"
    if not os.path.exists(binary):
        pytest.skip(f"no {binary} (scripts/setup-tests.sh makes it)")
    build_id = ElfFile(binary).build_id or ""
    debug = f"{SID_ROOT}/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    if not os.path.exists(debug):
        pytest.skip(f"no debug file {debug} for {binary}")
    return binary, debug


@functools.cache
def _ptypes(lib: str, version: tuple[int, int]) -> dict[str, Struct | None]:
    """``{type: Struct or None}`` for every type of ``version``'s family, from one gdb run per library (cached:
    the sections of a version share it). gdb indexes the DWARF on worker threads already, so running the
    versions' gdbs in parallel gains nothing."""
    env = dict(os.environ, DEBUGINFOD_URLS="")  # never download debug info: the DWARF must be on this machine
    out = subprocess.run(_gdb_command(lib, _types_of(FAMILIES[version])), capture_output=True, text=True,
                         env=env, timeout=120).stdout  # fmt: skip
    return {name: parse_ptype(body) for name, _, body in (part.partition("\n") for part in out.split(MARK)[1:])}


def dwarf_structs(version: tuple[int, int]) -> dict[str, Struct | None]:
    """``{type: Struct or None}`` for every type of ``version``'s family, or skip: no interpreter, libpython,
    gdb or DWARF."""
    lib = _libpython(version)
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed")
    structs = _ptypes(lib, version)
    if structs.get(ANCHOR) is None:
        pytest.skip(f"gdb finds no DWARF for {ANCHOR} in {lib}")
    return structs


def resolve(structs: dict[str, Struct | None], spec: str) -> int | None:
    """The number a spec names ("T::m.n", "sizeof(T)", "A + B"), or None when a member is absent. A type gdb
    does not know fails the test: with the anchor's DWARF there, it means a wrong type name in the spec."""
    total = 0
    for term in spec.split(" + "):
        sizeof = re.fullmatch(r"sizeof\((.+)\)", term)
        name, _, path = (sizeof[1], "", "") if sizeof else term.partition("::")
        found = structs.get(name)
        if found is None:
            pytest.fail(f"gdb printed no type {name!r} (for {spec!r}); the other types have DWARF")
        if sizeof:
            total += found.size
        elif path in found.members:
            total += found.members[path]
        else:
            return None
    return total


def _id(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


@pytest.mark.parametrize(
    ("version", "section"),
    [(v, s) for v in VERSIONS for s in SECTIONS],
    ids=[f"{_id(v)}-{s}" for v in VERSIONS for s in SECTIONS],
)
def test_table_offsets_match_dwarf(version, section):
    """Each mapped field of one Layout section equals what gdb prints; all disagreements reported at once."""
    structs = dwarf_structs(version)
    part = getattr(table_layout(version), section)
    wrong = []
    for field, spec in FAMILIES[version][section].items():
        if not hasattr(part, field):
            assert (section, field) in OPTIONAL_FIELDS, f"{section}.{field} is mapped but no Layout field"
            continue
        table, dwarf = getattr(part, field), resolve(structs, spec)
        if table != dwarf:
            wrong.append(f"{section}.{field}: table {table}, DWARF {'no such member' if dwarf is None else dwarf} "
                         f"({spec})")  # fmt: skip
    assert not wrong, f"{_id(version)} offsets disagree with {_libpython(version)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("version", [(3, 13), (3, 14)], ids=_id)
def test_debug_offsets_layouts_match_dwarf(version):
    """The layout nprof makes from a 3.13 or 3.14 interpreter's own ``_Py_DebugOffsets`` (read here from the
    stripped binary's ``.PyRuntime``, as the target's memory holds it at start), every mapped field equal to
    what gdb prints from its debug file: the published offsets and the facts nprof adds to them."""
    binary, debug = _sid_debug_file(version)
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed")
    elf = ElfFile(binary)
    runtime = elf.sections[".PyRuntime"].sh_addr
    layout = layout_from_debug_offsets(elf.read_svma(runtime, debug_offsets.READ_SIZE), version)
    structs = _ptypes(debug, version)
    assert structs.get(ANCHOR) is not None, f"gdb finds no DWARF in {debug}"
    wrong = []
    for section in SECTIONS:
        part = getattr(layout, section)
        for field, spec in FAMILIES[version][section].items():
            value, dwarf = getattr(part, field), resolve(structs, spec)
            if value != dwarf:
                wrong.append(f"{section}.{field}: nprof {value}, DWARF {dwarf} ({spec})")
        for field in dataclasses.fields(part):  # every offset nprof reads is mapped, or says why not
            value = getattr(part, field.name)
            if isinstance(value, int) and not isinstance(value, (bool, enum.Enum)):
                if field.name not in FAMILIES[version][section] and (section, field.name) not in NOT_MEMBERS:
                    wrong.append(f"{section}.{field.name} = {value}: no DWARF spec")
    assert layout.code.first_traceable == resolve(structs, "PyCodeObject::_co_firsttraceable")
    # 3.14's count is the low half of the object's first word, its flags (set in immortal objects) the top
    py_object = structs["PyObject"]
    assert py_object is not None and layout.objects.refcnt_split == ("ob_flags" in py_object.members)
    assert not wrong, f"{_id(version)} layout disagrees with {debug}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("version", VERSIONS, ids=_id)
def test_every_table_offset_is_checked(version):
    """A field added to a Layout section with a value and no spec would go unchecked: each one is mapped to a
    struct member or says in NOT_MEMBERS why it has none. Needs neither gdb nor the interpreter."""
    unchecked = []
    for section in SECTIONS:
        part = getattr(table_layout(version), section)
        for field in dataclasses.fields(part):
            value = getattr(part, field.name)
            if value is None or isinstance(value, (bool, enum.Enum)) or not isinstance(value, int):
                continue  # absent in this version, or a flag, an enum or a set: not an offset
            if field.name not in FAMILIES[version][section] and (section, field.name) not in NOT_MEMBERS:
                unchecked.append(f"{section}.{field.name} = {value}")
    assert not unchecked, f"{_id(version)}: no DWARF spec for " + ", ".join(unchecked)


def test_parse_ptype_nested_union_array_and_bitfields():
    """The parser on a hand-made ptype/o output with each shape the real ones have, so that a parser slip shows
    as itself rather than as a wrong offset in some table."""
    text = """/* offset      |    size */  type = struct outer {
/*      0      |       8 */    void (*on_delete)(void *);
/*      8      |      24 */    struct inner {
/*      8      |       8 */        PyObject *head;
/*     16      |       8 */        union {
/*                     8 */            long as_long;
/*                     8 */            struct {
/*     16: 0   |       4 */                unsigned int kind : 3;
/* XXX  4-byte padding   */

                                           /* total size (bytes):    8 */
                                       } bits;

                                           /* total size (bytes):    8 */
                                       };
/*     24      |       8 */        PyObject *localsplus[1];

                                   /* total size (bytes):   24 */
                               } interpreters;
/*     32      |      80 */    struct {
/*      0      |      40 */        PyBytesObject ob;

                                   /* total size (bytes):   40 */
                               } characters[2];

                               /* total size (bytes):  112 */
                             }"""
    parsed = parse_ptype(text)
    assert parsed == Struct(112, {
        "on_delete": 0, "interpreters": 8, "interpreters.head": 8, "interpreters.as_long": 16,
        "interpreters.bits": 16, "interpreters.bits.kind": 16, "interpreters.localsplus": 24, "characters": 32,
    })  # fmt: skip
    assert parse_ptype("No struct type named _nosuch.\n") is None
