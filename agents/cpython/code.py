"""Code objects: decoded once, cached by address, and never attributed to the wrong function.

A cached entry is used only when the code object's *identity header* (the fields it never changes, and
``co_version`` on 3.12+) equals the one captured with the frame that runs it; otherwise the new occupant of
the address is decoded and gets a new key. A code object is decoded only from bytes copied during a stop in
which a frame runs it (``session.capture``, or ``decode_copied`` from a snapshot's copy); one decoded to the
same name, file, first line, line table and prologue as one seen before takes that one's key. Keys carry a
generation in bits 48-63, so two functions that shared an address stay two frames.
Why, and what was measured: docs/decisions/code-object-identity.md."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from agents.cpython.capture import StackCapture
from agents.cpython.layout import CodeLayout, LineTableFormat, ObjectLayout, fields_struct
from agents.cpython.linetable import CodeLineTable, decode
from agents.cpython.memory import Prefetched, Read, ReadRanges, i64, plausible
from agents.cpython.strings import BYTES_FIRST_READ, STR_FIRST_READ, read_bytes, read_str

GENERATION_SHIFT = 48
GENERATION_MASK = 0xFFFF
#: RuntimeFrame.code of a C-stack shim frame (not an address: below the first page)
SHIM_KEY = 1
#: RuntimeFrame.code of a code object that could not be decoded
UNKNOWN_KEY = 2
#: RuntimeFrame.code of the frame that stands for the outer part of a chain deeper than
#: ``capture.MAX_FRAMES``, which is not read
CUT_KEY = 3
#: RuntimeFrame.code of the frame that stands for the chain of an older interpreter's thread state of the
#: same OS thread, which is not read (``threads.py``, subinterpreters)
OUTER_KEY = 4


#: the largest ``_co_firsttraceable`` believed: the prologue before a code's RESUME is one MAKE_CELL per cell
#: variable, COPY_FREE_VARS and RETURN_GENERATOR with its POP_TOP (Python/compile.c); more is not that field
MAX_FIRST_TRACEABLE = 1 << 12

#: a live code object's ob_refcnt is below this (3.12+ immortal ones hold _Py_IMMORTAL_REFCNT = UINT_MAX,
#: Include/object.h). pymalloc's free() overwrites ob_refcnt with the free-list link, a pointer or NULL
#: (Objects/obmalloc.c); glibc's free() overwrites the first two words (ob_refcnt, ob_type) with its own.
MAX_LIVE_REFCNT = 1 << 32


def alive(header: bytes, refcnt_split: bool = False) -> bool:
    """Whether the object whose header starts ``header`` looks allocated (plausible ``ob_refcnt``).
    ``refcnt_split`` (3.14+, ``ObjectLayout``): the count is the word's low 32 bits, and ``ob_flags`` its top
    16 (an immortal object's, set); ``ob_overflow`` between them is 0, where a free list's pointer has
    address bits."""
    refcnt = i64(header, 0)
    if refcnt_split:
        return refcnt & 0xFFFF_FFFF != 0 and refcnt >> 32 & 0xFFFF == 0
    return 0 < refcnt <= MAX_LIVE_REFCNT - 1


@dataclass
class CodeInfo:
    """One decoded code object."""

    key: int
    ident: tuple[int, ...]
    name: str  #: ``co_qualname`` on 3.11+, ``co_name`` before
    filename: str
    firstlineno: int
    table_bytes: bytes
    table_format: LineTableFormat
    table: CodeLineTable | None = None
    #: 3.11+ ``_co_firsttraceable``: a frame before this instruction is in its prologue (``frames.py``);
    #: None before 3.11, or where the field held no plausible value
    first_traceable: int | None = None

    def line(self, offset: int) -> int | None:
        if self.table is None:
            self.table = decode(self.table_format, self.table_bytes, self.firstlineno)
        return self.table.line(offset)


@dataclass
class CodeStats:
    decoded: int = 0
    reused_addresses: int = 0  #: an address came back holding a different code object
    same_content: int = 0  #: a new code object decoded to one seen before, and took its key
    not_code: int = 0  #: a frame's code pointer did not point at a code object
    unreadable: int = 0  #: a code object's strings or line table could not be read


class CodeCache:
    """Decoded code objects by address (current occupant) and by key (every occupant ever seen)."""

    def __init__(
        self,
        read: Read,
        code: CodeLayout,
        objects: ObjectLayout,
        types: dict[str, int],
        read_ranges: ReadRanges | None = None,
    ) -> None:
        self._read = read
        #: several ranges at once, during a stop: one scatter read where the session has one
        self._read_ranges = read_ranges or (lambda ranges: [read(addr, size) for addr, size in ranges])
        self._code = code
        self._objects = objects
        self.objects = objects  #: (``code_prefetch.py`` checks headers as this does)
        self._code_type = types["PyCode_Type"]
        self._str_type = types.get("PyUnicode_Type")
        self._bytes_type = types.get("PyBytes_Type")
        fields = {"ob_type": (objects.ob_type, "Q"), "firstlineno": (code.firstlineno, "i"),
                  "filename": (code.filename, "Q"), "name": (code.name, "Q"), "linetable": (code.linetable, "Q")}
        for name in ("qualname", "varnames", "localsplusnames", "localspluskinds"):
            offset = getattr(code, name)
            if offset is not None:
                fields[name] = (offset, "Q")
        if code.version is not None:
            fields["version"] = (code.version, "I")
        if code.first_traceable is not None:
            fields["first_traceable"] = (code.first_traceable, "i")
        self._ident, names = fields_struct(fields)
        self._field = {name: i for i, name in enumerate(names)}
        self._i_type = self._field["ob_type"]
        self._i_name = self._field["qualname"] if "qualname" in self._field else self._field["name"]
        self._by_addr: dict[int, CodeInfo] = {}
        self.by_key: dict[int, CodeInfo] = {}
        #: (name, file, first line, line table, first traceable instruction) -> the entry that has its key
        self._by_content: dict[tuple[str, str, int, bytes, int | None], CodeInfo] = {}
        self._generation: dict[int, int] = {}
        self.version = 0  #: code objects registered so far (``code_check.HeaderCheck``)
        self.stats = CodeStats()

    def lookup(
        self, addr: int, raw: bytes | memoryview, offset: int, counted: bool = True
    ) -> int | tuple[int, ...] | None:
        """The key of the known code object whose header was captured at ``raw[offset:]``; None if it is not a
        code object (counted in ``stats.not_code`` unless not ``counted``: a header read after resume, of an
        object that may have been freed since); its identity fields if it is one not decoded yet."""
        if offset < 0 or offset + self._ident.size > len(raw):
            return None
        ident = self._ident.unpack_from(raw, offset)
        entry = self._by_addr.get(addr)
        if entry is not None and entry.ident == ident:
            return entry.key
        if ident[self._i_type] != self._code_type:
            self.stats.not_code += counted
            return None
        return ident

    def unknown(self, codes: list[int]) -> list[int]:
        """The addresses in ``codes`` that hold no code object decoded yet."""
        known = self._by_addr
        return [code for code in codes if code not in known]

    @property
    def read(self) -> Read:
        """The target's memory, read one range at a time (``code_prefetch.py`` reads with it after resume)."""
        return self._read

    @property
    def identity(self) -> struct.Struct:
        """The struct of a code object's identity fields, from its header's start (``code_check.py``)."""
        return self._ident

    def entries_at(self, codes: list[int]) -> list[CodeInfo] | None:
        """The cache's entries for the code objects at ``codes``; None if one was never decoded."""
        get = self._by_addr.get
        entries = [get(code) for code in codes]
        return None if None in entries else entries  # type: ignore[return-value]

    def decode_new(self, capture: StackCapture, decode: bool = True) -> bool:
        """During the stop: settle each code pointer's key in ``capture.code_keys``, decoding the code
        objects not seen before (see the module's docstring for why it cannot wait until after resume),
        all of them together (``_decode_all``). Each distinct code object is identified once, however many
        frames run it (recursion, a loop of calls). ``decode`` False: known code objects only, nothing read
        (``CPythonSession.settle``, after resume); returns False if one was not known, and the capture must
        then be made in a stop."""
        raw, lookup = capture.raw, self.lookup
        keys: dict[int, int | None] = {}
        new: dict[int, tuple[int, ...]] = {}
        complete = True
        for code, offset in capture.code_headers.items():
            found = lookup(code, raw, offset)
            if isinstance(found, tuple):  # a code object not decoded yet
                if decode:
                    new[code] = found
                else:
                    complete = False
                found = None
            keys[code] = found
        if new:
            keys.update(self._decode_all(new))
        capture.code_keys = keys
        return complete

    def _decode_all(self, new: dict[int, tuple[int, ...]]) -> dict[int, int]:
        """Decode the code objects first seen in one stop (address -> identity header): the keys they get
        (``UNKNOWN_KEY`` for one whose strings could not be read).

        Their names, files and line tables are read with one scatter read for all, of each object's first
        bytes (``strings.STR_FIRST_READ``), which hold most whole: a longer one costs one read more. Each
        read here was one ``process_vm_readv`` of its own, 4-5 per code object, ~45 us inside the stop of
        a pytest run for each. Then the headers are read again, together: a code object must still be
        the one captured, and alive, once its strings are read (a pointer that was not a live code object
        at all; after resume, a freed one: seen here, a file name read back as the next loop iteration's
        "137")."""
        f, objects, size = self._field, self._objects, self._ident.size
        name_field = self._i_name
        heads = (STR_FIRST_READ, STR_FIRST_READ, objects.bytes_data + BYTES_FIRST_READ)
        wanted = [
            (ptr, head)
            for ident in new.values()
            for ptr, head in zip((ident[name_field], ident[f["filename"]], ident[f["linetable"]]), heads)
            if plausible(ptr)
        ]
        read = Prefetched(dict(zip((ptr for ptr, _ in wanted), self._read_ranges(wanted))), self._read)
        strings = {addr: self.strings_of(read, ident) for addr, ident in new.items()}
        readable = [addr for addr, found in strings.items() if found is not None]
        again = dict(zip(readable, self._read_ranges([(addr, size) for addr in readable])))
        keys: dict[int, int] = {}
        for addr, ident in new.items():
            found, header = strings[addr], again.get(addr, b"")
            if (found is None or len(header) < size or self._ident.unpack_from(header) != ident
                    or not alive(header, objects.refcnt_split)):  # fmt: skip
                self.stats.unreadable += 1
                keys[addr] = UNKNOWN_KEY
                continue
            keys[addr] = self._register(addr, ident, found)
        return keys

    def decode_copied(self, addr: int, read: Read) -> int | None:
        """Decode the code object at ``addr`` from bytes copied during one stop (``read`` serves them, and
        nothing else), in which a frame was seen running it (``code_prefetch.py`` says why that is as sure as
        decoding in the stop); its key, or None if they do not hold a live code object and its strings
        whole. A code object already known under the identity copied keeps its key."""
        header = read(addr, self._ident.size)
        found = self.lookup(addr, header, 0)
        if not isinstance(found, tuple):
            return found
        strings = self.strings_of(read, found)
        if strings is None or not alive(header, self._objects.refcnt_split):
            return None
        return self._register(addr, found, strings)

    def _register(self, addr: int, ident: tuple[int, ...], found: tuple[str, str, bytes]) -> int:
        """Enter a decoded code object under a new key (the next generation of its address), or under the
        key of one decoded to the same content before (the module's docstring says why)."""
        if addr in self._by_addr:
            self.stats.reused_addresses += 1
        generation = self._generation.get(addr, -1) + 1
        self._generation[addr] = generation
        name, filename, table = found
        firstlineno = ident[self._field["firstlineno"]]
        first = None
        if "first_traceable" in self._field:
            first = ident[self._field["first_traceable"]]
            first = first if 0 <= first <= MAX_FIRST_TRACEABLE else None
        content = (name, filename, firstlineno, table, first)
        same = self._by_content.get(content)
        if same is not None:  # its own identity, for the checks at this address; the other's key and strings
            info = CodeInfo(same.key, ident, same.name, same.filename, firstlineno, same.table_bytes,
                            same.table_format, same.table, first)  # fmt: skip
            self.stats.same_content += 1
        else:
            key = addr | (generation & GENERATION_MASK) << GENERATION_SHIFT
            info = CodeInfo(key, ident, name, filename, firstlineno, table, self._code.linetable_format,
                            first_traceable=first)  # fmt: skip
            self._by_content[content] = self.by_key[key] = info
        self._by_addr[addr] = info
        self.version += 1
        self.stats.decoded += 1
        return info.key

    def strings_of(self, read: Read, ident: tuple[int, ...]) -> tuple[str, str, bytes] | None:
        """(name, file name, line table) of the code object whose identity is ``ident``; None if one of them
        cannot be read."""
        f, objects = self._field, self._objects
        name = read_str(read, ident[self._i_name], objects, self._str_type)
        filename = read_str(read, ident[f["filename"]], objects, self._str_type)
        table = read_bytes(read, ident[f["linetable"]], objects, self._bytes_type)
        if name is None or filename is None or table is None:
            return None
        return name, filename, table

    def get(self, key: int) -> CodeInfo | None:
        return self.by_key.get(key)

    def code_address(self, key: int) -> int:
        return key & ((1 << GENERATION_SHIFT) - 1)
