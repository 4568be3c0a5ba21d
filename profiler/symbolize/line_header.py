"""The header of a line program (DWARF 5, section 6.2.4; DWARF 4, section 6.2.4): the state machine's
parameters and the file table that DW_LNS_set_file, DW_AT_call_file and DW_AT_decl_file index.

DWARF 2-4 list directories and files as NUL-terminated strings; DWARF 5 describes each entry's fields
with (content type, form) pairs, so paths may live in ``.debug_line_str`` (gcc 12 uses DW_FORM_line_strp).
DWARF 5 numbers files from 0 and its directory 0 is the unit's own directory; DWARF 2-4 number files from 1
and directory 0 means DW_AT_comp_dir. Other relative directories are taken relative to DW_AT_comp_dir, as
binutils does; paths are normalised (``./Include/x.h`` -> ``Include/x.h``). A relative DW_AT_comp_dir (a
reproducible build's ``-ffile-prefix-map=DIR=.``, as Debian's libc has: ``./elf``) stays relative:
``elf/dl-error-skeleton.c``, as gdb's ``./elf/dl-error-skeleton.c``.

The header also says where the unit's source tree is (``source_root``), which outputs show paths under
relative to (``tree/source_paths.py``): the compilation directory, or the directory its relative include
directories climb to. pyenv builds CPython in its source tree (``/tmp/python-build.N/Python-3.11.7``, whose
directories are ``./Include``, ``./Modules``); Debian builds it out of tree, in ``build-static``, whose
directories are ``../Python``, ``../Include``, so the tree is the directory above.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from profiler.errors import BinaryError
from profiler.symbolize.dwarf_forms import DW_FORM_string, UnitFormat, read_variable
from profiler.symbolize.dwarf_reader import Cursor, c_string

# Line number header entry content types (DWARF 5, section 7.22, table 7.27)
DW_LNCT_path, DW_LNCT_directory_index = 0x1, 0x2
#: more directories or files than this in one header is corrupt
MAX_ENTRIES = 1_000_000
#: more (content type, form) pairs than this per entry is corrupt (DWARF 5 defines 5 content types)
MAX_FORMATS = 64


@dataclass(frozen=True)
class LineHeader:
    version: int
    minimum_instruction_length: int
    line_base: int
    line_range: int
    opcode_base: int
    standard_opcode_lengths: tuple[int, ...]
    program_start: int  #: offset of the first opcode in .debug_line
    program_end: int  #: offset just past the last opcode
    file_names: dict[int, str]  #: file index -> path
    #: the root of the unit's source tree (module docstring), absolute; None where the unit's directory is
    #: relative or unknown, or the climb leaves no directory of its own (``/``, ``/tmp``)
    source_root: str | None = None


FormText = Callable[[int, int], "str | None"]


def read_line_header(
    line: bytes, offset: int, address_size: int, comp_dir: str | None, form_text: FormText
) -> LineHeader:
    """The line program header at ``offset`` of .debug_line. ``form_text(form, value)`` resolves
    DW_FORM_strp/line_strp/strx values (the unit's string tables)."""
    cursor = Cursor(line, offset)
    length, offset_size = cursor.initial_length()
    cursor.end = end = cursor.pos + length
    version = cursor.u16()
    if not 2 <= version <= 5:
        raise BinaryError(f"line program at 0x{offset:x}: unsupported version {version}")
    if version >= 5:
        address_size, _segment_selector_size = cursor.u8(), cursor.u8()
    header_length = cursor.uint(offset_size)
    program_start = cursor.pos + header_length
    min_inst = cursor.u8()
    if version >= 4:
        cursor.u8()  # maximum_operations_per_instruction: 1 on every non-VLIW target
    cursor.u8()  # default_is_stmt: rows are kept whatever their is_stmt
    line_base, line_range, opcode_base = cursor.s8(), cursor.u8(), cursor.u8()
    lengths = tuple(cursor.u8() for _ in range(max(opcode_base - 1, 0)))
    if not cursor.pos <= program_start <= end:
        raise BinaryError(f"line program at 0x{offset:x}: header length past the program's end")
    if version >= 5:
        fmt = UnitFormat(version, offset_size, address_size)
        dirs = [path for path, _ in _entries_v5(cursor, fmt, form_text)]
        files = _entries_v5(cursor, fmt, form_text)
        base = comp_dir or (dirs[0] if dirs else "")
    else:
        dirs = [comp_dir or "", *(t.decode("utf-8", "replace") for t in _strings_v4(cursor))]
        files = _files_v4(cursor)
        base = comp_dir or ""
    first = 0 if version >= 5 else 1
    names: dict[int, str] = {}
    for i, (name, dir_index) in enumerate(files):
        if dir_index == 0:  # the unit's own directory, which ``base`` is: joining it again doubled a relative one
            directory = base
        else:
            directory = posixpath.join(base, dirs[dir_index] if 0 < dir_index < len(dirs) else "")
        names[i + first] = posixpath.normpath(posixpath.join(directory, name)) if name else ""
    root = source_root(base, dirs[1:])
    return LineHeader(
        version, min_inst, line_base, line_range, opcode_base, lengths, program_start, end, names, root
    )


def source_root(comp_dir: str, dirs: list[str]) -> str | None:
    """The root of a unit's source tree: ``comp_dir``, up as many levels as its relative include
    directories ``dirs`` climb (``../Include`` from ``build-static``: one). None if ``comp_dir`` is not
    absolute, or if the root is ``/`` or a directory right under it, which hold no one build's tree."""
    if not comp_dir.startswith("/"):
        return None
    climb = 0
    for directory in dirs:
        if directory.startswith(".."):
            parts = posixpath.normpath(directory).split("/")
            climb = max(climb, next((i for i, part in enumerate(parts) if part != ".."), len(parts)))
    root = posixpath.normpath(comp_dir)
    for _ in range(climb):
        root = posixpath.dirname(root)
    return root if root.count("/") >= 2 else None


def _entries_v5(cursor: Cursor, fmt: UnitFormat, form_text: FormText) -> list[tuple[str, int]]:
    """A DWARF 5 directory or file name table: (path, directory index) per entry (section 6.2.4.1)."""
    count = cursor.u8()
    if count > MAX_FORMATS:
        raise BinaryError(f"line header at 0x{cursor.pos:x}: {count} entry formats")
    formats = [(cursor.uleb(), cursor.uleb()) for _ in range(count)]
    entries: list[tuple[str, int]] = []
    total = cursor.uleb()
    if total > MAX_ENTRIES:
        raise BinaryError(f"line header at 0x{cursor.pos:x}: {total} entries")
    for _ in range(total):
        path, dir_index = "", 0
        for content, form in formats:
            size = fmt.fixed_size(form)
            if size >= 0:
                value = cursor.uint(size)
            else:
                value, cursor.pos = read_variable(cursor.data, cursor.pos, cursor.end, form, fmt)
            if content == DW_LNCT_path and form == DW_FORM_string:  # inline: an offset in .debug_line
                path = (c_string(cursor.data, value) or b"").decode("utf-8", "replace")
            elif content == DW_LNCT_path:
                path = form_text(form, value) or ""
            elif content == DW_LNCT_directory_index:
                dir_index = value
        entries.append((path, dir_index))
    return entries


def _strings_v4(cursor: Cursor) -> list[bytes]:
    """include_directories: strings up to an empty one (DWARF 4, section 6.2.4 item 11)."""
    found: list[bytes] = []
    for _ in range(MAX_ENTRIES):
        text = cursor.cstr()
        if not text:
            return found
        found.append(text)
    raise BinaryError(f"line header: more than {MAX_ENTRIES} directories")


def _files_v4(cursor: Cursor) -> list[tuple[str, int]]:
    """file_names: (name, directory index, mtime, length) up to an empty name (item 12)."""
    found: list[tuple[str, int]] = []
    for _ in range(MAX_ENTRIES):
        name = cursor.cstr()
        if not name:
            return found
        dir_index = cursor.uleb()
        cursor.uleb(), cursor.uleb()  # modification time, length: unused
        found.append((name.decode("utf-8", "replace"), dir_index))
    raise BinaryError(f"line header: more than {MAX_ENTRIES} files")
