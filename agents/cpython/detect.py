"""Recognising CPython in a process: which file holds the interpreter, its version, ``_PyRuntime`` and layout.

The interpreter lives in ``libpython3.X.so`` when the build is shared (pyenv), or in the executable when it is
linked statically (Debian's /usr/bin/python3.11). Either way ``_PyRuntime`` is a GLOBAL OBJECT in ``.dynsym``,
so it survives stripping (reference section 1.1); from 3.10 it is also alone in the ``.PyRuntime`` section,
the fallback when no symbol table is usable.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from agents.cpython import debug_offsets
from agents.cpython.layout import Layout, ObjectLayout
from agents.cpython.offsets import table_layout
from profiler.binary.objfile import ObjectFile, ObjectFileCache
from profiler.errors import BinaryError
from profiler.target.maps import Mapping
from profiler.target.process import TargetProcess

SUPPORTED = ((3, 8), (3, 14))  #: oldest and newest minor version the agent reads

#: ``libpython3.12.so.1.0``, ``python3.11``, ``libpython3.13t.so``: the minor version and ABI flags
_NAME = re.compile(r"^(?:lib)?python3\.(\d+)([a-z]*)(?:\.so.*)?$")

#: debug builds (Py_DEBUG, ABI flag "d") whose offsets match the tables: Debian's python3.11d (3.11.2),
#: checked here frame by frame and local by local against sys._current_frames. Py_DEBUG adds fields to some
#: runtime structs (Py_REF_DEBUG's totals), so the other versions' tables are not trusted for them.
DEBUG_TABLES_CHECKED = frozenset({(3, 11)})
#: from this version every offset is read from the build's own _Py_DebugOffsets, a debug build's included
DEBUG_OFFSETS_FROM = (3, 13)

#: the objects and types whose addresses the agent compares against (all GLOBAL in .dynsym, 3.8-3.14)
TYPE_SYMBOLS = (
    "PyCode_Type", "PyUnicode_Type", "PyBytes_Type", "PyLong_Type", "PyBool_Type", "PyFloat_Type",
    "PyTuple_Type", "PyList_Type", "PyDict_Type", "PyCell_Type", "PyModule_Type",
    "_Py_NoneStruct", "_Py_TrueStruct", "_Py_FalseStruct",
)


@dataclass
class Interpreter:
    """Where the interpreter sits in one process, and how to read it."""

    path: str  #: the file as the target's maps name it
    obj: ObjectFile
    bias: int  #: avma - svma of ``obj``
    version: tuple[int, int]
    runtime: int  #: avma of ``_PyRuntime``
    layout: Layout
    types: dict[str, int]  #: avma of each found ``TYPE_SYMBOLS`` entry

    @property
    def label(self) -> str:
        return f"CPython {self.version[0]}.{self.version[1]} ({os.path.basename(self.path)})"


class DetectError(Exception):
    """Why a process is not a CPython nprof can read; the message is the one-line notice for the user."""


def interpreter_mapping(process: TargetProcess) -> Mapping | None:
    """The executable mapping of the loaded libpython3.X, else of the executable if it is a python3.X
    binary or exports ``_PyRuntime`` (checked by the caller).

    Only code the process runs counts: a mapping with execute permission. A process can also map a
    libpython file just to read it, and nprof itself does so for the interpreter it profiles (read-only,
    MAP_SHARED: ``r--s``). Taken for the interpreter, such a mapping would name the wrong version (and
    a process that is not Python at all would pass for one) and give the wrong load bias.
    """
    for m in process.maps.mappings:
        if not m.file_backed or not m.executable:
            continue
        base = os.path.basename(m.path.removesuffix(" (deleted)"))
        if base.startswith("libpython3.") and _NAME.match(base):
            return m
    return executable_mapping(process)


def executable_mapping(process: TargetProcess) -> Mapping | None:
    """The first executable mapping of the process's main program."""
    exe = os.path.basename(process.exe)
    for m in process.maps.mappings:
        if m.file_backed and m.executable:
            if m.path == process.exe or os.path.basename(m.path.removesuffix(" (deleted)")) == exe:
                return m
    return None


def interpreter_modules(process: TargetProcess, interpreter: Interpreter) -> frozenset[str]:
    """The paths of the interpreter's own code in ``process``: its file, and the executable when that is
    CPython's launcher (a ``python3.X`` binary, Programs/python.c) rather than a program embedding it."""
    paths = {interpreter.path}
    program = executable_mapping(process)
    if program is not None and version_from_name(program.path) is not None:
        paths.add(program.path)
    return frozenset(paths)


def version_from_name(path: str) -> tuple[tuple[int, int], str] | None:
    match = _NAME.match(os.path.basename(path.removesuffix(" (deleted)")))
    if match is None:
        return None
    return (3, int(match.group(1))), match.group(2)


def _traces_refs(process: TargetProcess, types: dict[str, int]) -> bool:
    """Whether objects start with Py_TRACE_REFS's two list links (``_ob_next``, ``_ob_prev``) before their
    refcount and type, which moves every field nprof reads. Told from memory, not from the build's name:
    ``True``'s type pointer is at offset 8 (Include/object.h) unless the links are there."""
    true, boolean = types.get("_Py_TrueStruct"), types.get("PyBool_Type")
    if true is None or boolean is None:
        return False
    data = process.read(true + ObjectLayout.ob_type, 8)
    return len(data) == 8 and int.from_bytes(data, "little") != boolean


def _version_from_symbol(obj: ObjectFile) -> tuple[int, int] | None:
    """``Py_Version`` (3.11+): ``const unsigned long`` = PY_VERSION_HEX, read from the file (it is rodata)."""
    symbols = obj.symbols
    hit = symbols.address_of("Py_Version") if symbols is not None else None
    if hit is None:
        return None
    data = obj.elf.read_svma(hit[0], 4)
    if len(data) != 4:
        return None
    (hexversion,) = struct.unpack("<I", data)
    return hexversion >> 24 & 0xFF, hexversion >> 16 & 0xFF


def _runtime_svma(obj: ObjectFile) -> int | None:
    symbols = obj.symbols
    hit = symbols.address_of("_PyRuntime") if symbols is not None else None
    if hit is not None:
        return hit[0]
    section = obj.elf.sections.get(".PyRuntime")  # 3.10+: bpo-32280, Python/pylifecycle.c
    return section.sh_addr if section is not None and section.sh_addr else None


def _data_addresses(obj: ObjectFile, bias: int, names: tuple[str, ...]) -> dict[str, int]:
    """avma of each of ``names`` that ``obj`` defines."""
    symbols = obj.symbols
    found = {}
    for name in names:
        hit = symbols.address_of(name) if symbols is not None else None
        if hit is not None:
            found[name] = hit[0] + bias
    return found


def _copied_into_program(
    process: TargetProcess, objects: ObjectFileCache, interpreter: Mapping, names: tuple[str, ...]
) -> dict[str, int]:
    """The interpreter's data objects of ``names`` that the main program holds copies of, and where: a
    program linked with libpython that uses ``Py_None`` or ``&PyUnicode_Type`` directly (uWSGI), built as a
    PIE, has copy relocations for them (``R_X86_64_COPY``). The dynamic loader then copies each object into
    the program's own data, and every reference, libpython's own through its GOT included, uses the copy:
    the program's definition comes first in the symbol search order (the System V ABI's symbol
    interposition). Objects compared against libpython's originals, which nothing uses, made every code
    object unreadable, and ``True`` looked like a Py_TRACE_REFS build's."""
    program = executable_mapping(process)
    if program is None or program.path == interpreter.path:
        return {}
    try:
        obj = objects.open(process.mapped_file_path(program), program.path, process.root_path)
    except BinaryError:
        return {}
    bias = obj.elf.bias_for(program.start, program.offset, program.executable)
    return _data_addresses(obj, bias, names) if bias is not None else {}


def _layout(process: TargetProcess, version: tuple[int, int], runtime: int) -> Layout:
    if version <= (3, 12):
        layout = table_layout(version)
        if layout is None:
            raise DetectError(f"CPython {version[0]}.{version[1]} has no offset table")
        return layout
    data = process.read(runtime, debug_offsets.READ_SIZE)
    try:
        return debug_offsets.layout_from_debug_offsets(data, version)
    except debug_offsets.DebugOffsetsError as e:
        raise DetectError(f"CPython {version[0]}.{version[1]}: unusable _Py_DebugOffsets ({e})") from e


def locate(process: TargetProcess, objects: ObjectFileCache) -> Interpreter:
    """Find the interpreter in ``process``; raise DetectError with the user-facing reason if there is none."""
    mapping = interpreter_mapping(process)
    if mapping is None:
        raise DetectError("no libpython or python executable mapped: not a CPython process")
    try:
        obj = objects.open(process.mapped_file_path(mapping), mapping.path, process.root_path)
    except BinaryError as e:
        raise DetectError(f"cannot read the interpreter binary: {e}") from e
    svma = _runtime_svma(obj)
    named = version_from_name(mapping.path)
    if svma is None:
        if named is not None and named[0] < SUPPORTED[0]:  # before 3.7 there was no _PyRuntime to export
            minor = named[0][1]
            raise DetectError(f"CPython 3.{minor} is not supported (nprof reads 3.8 to 3.14)")
        if named is None and not os.path.basename(mapping.path).startswith("libpython"):  # a program, not Python
            raise DetectError(f"not a CPython process (no libpython mapped, and {os.path.basename(mapping.path)} "
                              "exports no _PyRuntime)")  # fmt: skip
        raise DetectError(f"{mapping.path} exports no _PyRuntime: not a CPython 3.8+ interpreter")
    flags = named[1] if named else ""
    version = _version_from_symbol(obj) or (named[0] if named else None)
    if version is None:
        raise DetectError(f"cannot tell the Python version of {mapping.path}")
    label = f"CPython {version[0]}.{version[1]}"
    if not SUPPORTED[0] <= version <= SUPPORTED[1]:
        raise DetectError(f"{label} is not supported (nprof reads 3.8 to 3.14)")
    if "t" in flags:
        raise DetectError(f"{label} is a free-threaded build, whose object layout nprof does not read")
    if "d" in flags and not (version in DEBUG_TABLES_CHECKED or version >= DEBUG_OFFSETS_FROM):
        raise DetectError(f"{label} is a debug build, whose offsets nprof has not checked (it reads the debug "
                          "builds of 3.11 and of 3.13 on)")  # fmt: skip
    bias = obj.elf.bias_for(mapping.start, mapping.offset, mapping.executable)
    if bias is None:
        raise DetectError(f"cannot place {mapping.path} in memory (no PT_LOAD covers its mapping)")
    names = ("_PyRuntime", *TYPE_SYMBOLS)
    data = _data_addresses(obj, bias, names)
    data.update(_copied_into_program(process, objects, mapping, names))
    runtime = data.get("_PyRuntime", svma + bias)
    layout = _layout(process, version, runtime)
    types = {name: data[name] for name in TYPE_SYMBOLS if name in data}
    if "PyCode_Type" not in types:
        raise DetectError(f"{mapping.path} exports no PyCode_Type, needed to validate code objects")
    if _traces_refs(process, types):
        raise DetectError(f"{label} is built with Py_TRACE_REFS, whose object header nprof does not read")
    return Interpreter(mapping.path, obj, bias, version, runtime, layout, types)
