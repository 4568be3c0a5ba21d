"""ELF symbol tables as numpy columns: built with one ``np.frombuffer`` over the section bytes, looked up with
``searchsorted``. pyelftools' ``get_symbol`` parses one symbol per call, far too slow for libxul-sized tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profiler.binary.elf import ElfFile

# ELF gABI, "Symbol Table": Elf64_Sym
ELF64_SYM = np.dtype(
    [
        ("st_name", "<u4"),
        ("st_info", "u1"),
        ("st_other", "u1"),
        ("st_shndx", "<u2"),
        ("st_value", "<u8"),
        ("st_size", "<u8"),
    ]
)
STT_NOTYPE = 0
STT_OBJECT = 1
STT_FUNC = 2
STT_GNU_IFUNC = 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
SHN_UNDEF = 0

#: When several symbols share an address (libc's ``write``/``__write``/``__libc_write``), prefer the
#: exported names a user would search for.
_BIND_RANK = np.array([2, 0, 1] + [3] * 13, dtype=np.uint8)  # indexed by st_bind: GLOBAL, WEAK, LOCAL, other


class SymbolTable:
    """Function symbols of one file, sorted by address, plus name lookup of any defined symbol, and the
    untyped labels of code sections for names where no function symbol covers an address."""

    def __init__(
        self,
        syms: np.ndarray,
        strtab: bytes,
        source: str,
        section_ends: np.ndarray | None = None,
        executable: np.ndarray | None = None,
    ) -> None:
        """``section_ends[i]`` is the end address of section i; it bounds symbols of size 0. ``executable[i]``:
        section i holds code, so its untyped (STT_NOTYPE) symbols are assembly entry points."""
        self.source = source  #: ".symtab", ".dynsym" or the debug file it came from
        self._strtab = strtab
        self._all = syms[(syms["st_shndx"] != SHN_UNDEF) & (syms["st_value"] != 0)]
        kind = syms["st_info"] & 0xF
        funcs = syms[
            ((kind == STT_FUNC) | (kind == STT_GNU_IFUNC))
            & (syms["st_shndx"] != SHN_UNDEF)
            & (syms["st_value"] != 0)
        ]
        rank = _BIND_RANK[funcs["st_info"] >> 4]
        order = np.lexsort((rank, funcs["st_value"]))
        funcs = funcs[order]
        # keep the best-ranked symbol at each address
        if len(funcs):
            first = np.ones(len(funcs), dtype=bool)
            first[1:] = funcs["st_value"][1:] != funcs["st_value"][:-1]
            funcs = funcs[first]
        self.addrs: np.ndarray = np.ascontiguousarray(funcs["st_value"], dtype=np.uint64)
        self.sizes: np.ndarray = np.ascontiguousarray(funcs["st_size"], dtype=np.uint64)
        self._names: np.ndarray = np.ascontiguousarray(funcs["st_name"])
        labels = _code_labels(syms, kind, executable)
        # a size-0 symbol (a function written in assembly, a label) ends at the next function or label, or
        # at the end of its section
        boundaries = _sorted_unique(np.concatenate((self.addrs, labels["st_value"].astype(np.uint64))))
        next_start = _next_boundary(self.addrs, funcs["st_shndx"], boundaries, section_ends)
        self.ends = np.where(self.sizes > 0, self.addrs + self.sizes, next_start)
        self._by_name: dict[str, int] | None = None
        label_starts = np.ascontiguousarray(labels["st_value"], dtype=np.uint64)
        self._labels = (
            label_starts,
            _next_boundary(label_starts, labels["st_shndx"], boundaries, section_ends),
            np.ascontiguousarray(labels["st_name"]),
        )

    def label_many(self, svmas: list[int]) -> list[str | None]:
        """For each address, the code label covering it (``_code_labels``; it ends at the next function or
        label), or None. Only for naming an address no function symbol covers: a label inside a function is
        not a function of its own."""
        starts, ends, names = self._labels
        if not len(starts):
            return [None] * len(svmas)
        q = np.asarray(svmas, dtype=np.uint64)
        idx = np.searchsorted(starts, q, side="right").astype(np.int64) - 1
        return [
            self._name_at(int(names[i])) if i >= 0 and addr < int(ends[i]) else None
            for i, addr in zip(idx.tolist(), q.tolist())
        ]

    def __len__(self) -> int:
        return len(self.addrs)

    def _name_at(self, offset: int) -> str:
        return c_string(self._strtab, offset)

    def lookup_many(self, svmas: Sequence[int] | np.ndarray) -> list[tuple[str, int, int] | None]:
        """For each address: (name, function start, function end), or None if no function covers it."""
        q = np.asarray(svmas, dtype=np.uint64)
        idx = np.searchsorted(self.addrs, q, side="right").astype(np.int64) - 1
        out: list[tuple[str, int, int] | None] = []
        for i, addr in zip(idx.tolist(), q.tolist()):
            if i >= 0 and addr < int(self.ends[i]):
                out.append((self._name_at(int(self._names[i])), int(self.addrs[i]), int(self.ends[i])))
            else:
                out.append(None)
        return out

    def function_names(self) -> list[str]:
        """Every function's name, parallel to ``addrs``/``ends``: for one-off scans by name pattern (an agent
        collecting the address ranges of a family of functions), not for per-sample lookups."""
        strtab, find, names = self._strtab, self._strtab.find, []
        for offset in self._names.tolist():  # Python ints: a numpy scalar per element costs 3x more
            end = find(b"\0", offset)
            names.append(strtab[offset : end if end >= 0 else len(strtab)].decode("utf-8", "replace"))
        return names

    def lookup(self, svma: int) -> tuple[str, int, int] | None:
        return self.lookup_many(np.array([svma], dtype=np.uint64))[0]

    def address_of(self, name: str) -> tuple[int, int] | None:
        """(st_value, st_size) of a defined symbol of any type, e.g. a data object like ``_PyRuntime``."""
        if self._by_name is None:
            self._by_name = {}
        hit = self._by_name.get(name)
        if hit is not None:
            row = self._all[hit]
            return int(row["st_value"]), int(row["st_size"])
        # String tables share suffixes ("malloc" may be the tail of "__libc_malloc"), so any occurrence of
        # the name followed by NUL is a candidate st_name offset.
        needle = name.encode() + b"\0"
        offsets = []
        at = self._strtab.find(needle)
        while at >= 0:
            offsets.append(at)
            at = self._strtab.find(needle, at + 1)
        for off in offsets:
            rows = np.nonzero(self._all["st_name"] == off)[0]
            if len(rows):
                self._by_name[name] = int(rows[0])
                row = self._all[rows[0]]
                return int(row["st_value"]), int(row["st_size"])
        return None


def c_string(table: bytes, offset: int) -> str:
    """The NUL-terminated name at ``offset`` of a string table (``.strtab``, ``.dynstr``)."""
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _code_labels(syms: np.ndarray, kind: np.ndarray, executable: np.ndarray | None) -> np.ndarray:
    """The STT_NOTYPE symbols of code sections, by address: labels written in assembly without a ``.type``
    (ld.so's ``_start`` and ``_dl_start_user``, where every command's first samples are)."""
    if executable is None or not len(executable):
        return syms[:0]
    shndx = np.minimum(syms["st_shndx"].astype(np.int64), len(executable) - 1)
    chosen = (kind == STT_NOTYPE) & (syms["st_shndx"] != SHN_UNDEF) & (syms["st_value"] != 0) & executable[shndx]
    labels = syms[chosen]
    ordered: np.ndarray = labels[np.argsort(labels["st_value"], kind="stable")]
    return ordered


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D array, without it: numpy's set functions import ``numpy.ma`` at their first
    call (docs/decisions/start-up-latency.md)."""
    ordered = np.sort(values)
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def _next_boundary(
    starts: np.ndarray, shndx: np.ndarray, boundaries: np.ndarray, section_ends: np.ndarray | None
) -> np.ndarray:
    """For each start, the first of ``boundaries`` (sorted) above it, or its section's end if sooner."""
    following = np.searchsorted(boundaries, starts, side="right")
    out = np.full(len(starts), np.iinfo(np.uint64).max, dtype=np.uint64)
    inside = following < len(boundaries)
    out[inside] = boundaries[following[inside]]
    if section_ends is not None and len(section_ends):
        out = np.minimum(out, section_ends[np.minimum(shndx.astype(np.int64), len(section_ends) - 1)])
    return out


def load_symbols(elf: ElfFile, supplement: ElfFile | None = None) -> SymbolTable | None:
    """``.symtab`` if present (it has the static functions), else ``.dynsym``; None if neither. A
    ``supplement`` (the MiniDebugInfo image of a stripped file, ``minidebug.py``) adds its ``.symtab`` to the
    ``.dynsym``: it holds only the functions ``.dynsym`` lacks."""
    found, source = _section_symbols(elf, ".symtab"), ".symtab"
    if found is None:
        found, source = _section_symbols(elf, ".dynsym"), ".dynsym"
        extra = _section_symbols(supplement, ".symtab") if supplement is not None else None
        if extra is not None and supplement is not None:
            source = supplement.path if found is None else f".dynsym+{supplement.path}"
            found = extra if found is None else _joined(found, extra)
    if found is None:
        return None
    syms, strtab = found
    return SymbolTable(syms.copy(), strtab, source, elf.section_ends(), elf.executable_sections())


def _joined(first: tuple[np.ndarray, bytes], second: tuple[np.ndarray, bytes]) -> tuple[np.ndarray, bytes]:
    """Two symbol tables as one: the second's names after the first's in one string table."""
    (syms, strtab), (more, more_strtab) = first, second
    more = more.copy()
    more["st_name"] += len(strtab)
    return np.concatenate([syms, more]), strtab + more_strtab


def _section_symbols(elf: ElfFile, name: str) -> tuple[np.ndarray, bytes] | None:
    """The symbols of section ``name`` (``.symtab``, ``.dynsym``) and their string table, or None."""
    info = elf.sections.get(name)
    if info is None or info.sh_type == "SHT_NOBITS":
        return None
    data = elf.section_data(name)
    strtab_name = elf.section_name(info.sh_link)
    strtab = elf.section_data(strtab_name) if strtab_name else None
    if data is None or strtab is None:
        return None
    count = len(data) // ELF64_SYM.itemsize
    return np.frombuffer(data, dtype=ELF64_SYM, count=count), bytes(strtab)
