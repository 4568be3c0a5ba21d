"""Frames -> names, files, lines and inlined frames, once per unique frame, at the end of a recording
(DESIGN.md section 2, rule 2: addresses in, names later). ``symbolize`` takes a batch of frame keys
(``(kind, module or agent index, address, offset)``, as the profile's frame table holds them) and returns
what each is called; the caller puts the names in the profile (``sampling/frame_names.py``).

Native frames are resolved per module: one batched ``searchsorted`` over its symbol table names every
frame; where the module (or its separate debug file) has DWARF, ``DwarfResolver`` adds the source line
and expands inlined calls into frames of their own. A pc in a PLT stub is ``name@plt`` (``binary/plt.py``).
Frames whose module has no symbol covering the address show as ``module+0xoffset``, so they can still be
looked up by hand (``addr2line -e module 0x…``): the offset of the start of the function, as the FDE
covering the address delimits it, else of the address.
Runtime frames are described by their agent.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from profiler.binary.cache import TableCache
from profiler.binary.objfile import ObjectFile
from profiler.binary.plt import PLT_SUFFIX
from profiler.errors import BinaryError
from profiler.model import (
    SYNTHETIC_LABELS,
    FrameInfo,
    FrameKind,
    Mechanism,
    Module,
    NativeFrame,
    RuntimeFrame,
    SyntheticFrame,
    UnwindMethod,
)  # fmt: skip
from profiler.profile.tables import FrameKey
from profiler.runtime import AgentSession, InterpreterGlue, RuntimeMechanics
from profiler.symbolize.demangle import demangle
from profiler.symbolize.dwarf import DwarfResolver
from profiler.symbolize.dwarf_sections import has_debug_info
from profiler.symbolize.startup import mark_startup_frames

_SYNTHETIC = frozenset(int(kind) for kind in SyntheticFrame)

#: seconds the DWARF line/inline resolution of one recording may take; frames not reached by then keep
#: their symbol-table names (libpython's worst case, every function, measured 3.1 s here)
DWARF_BUDGET = 20.0


def unversioned(name: str) -> str:
    """``__libc_start_main@@GLIBC_2.34`` -> ``__libc_start_main``: .symtab keeps GNU symbol-version
    suffixes ("@" or "@@" then the version node), which are not part of the function's name."""
    at = name.find("@")
    return name[:at] if at > 0 else name


def module_label(module: Module | None) -> str:
    if module is None:
        return "[unknown]"
    return os.path.basename(module.path) if module.file_backed else module.path


@dataclasses.dataclass
class Symbolized:
    """What ``symbolize`` found, indexed like the keys it was given."""

    frames: list[FrameInfo]  #: per key: the function it is in (outermost of an inline chain)
    inlined: dict[int, list[FrameInfo]]  #: key index -> the inlined calls inside it, outermost first
    #: one line per module whose DWARF could not be read whole: its frames there may lack lines or inlines
    notices: list[str] = dataclasses.field(default_factory=list)
    #: key index -> module id, for native frames of file-backed modules that nothing named (``module+0x…``)
    unnamed: dict[int, int] = dataclasses.field(default_factory=dict)


def symbolize(
    keys: Sequence[FrameKey],
    modules: Sequence[Module],
    agent_names: Sequence[str],
    objects: Mapping[int, ObjectFile],
    agents: Mapping[str, AgentSession] | None = None,
    dwarf_budget: float = DWARF_BUDGET,
) -> Symbolized:
    """Name each frame of ``keys``: native ones by ``modules[module]`` and its object file
    (``objects[module]``), runtime ones by the agent named ``agent_names[index]`` among ``agents``."""
    agents = agents or {}
    out: list[FrameInfo | None] = [None] * len(keys)
    inlined: dict[int, list[FrameInfo]] = {}
    by_module: dict[int, list[int]] = defaultdict(list)
    for i, (kind, owner, address, offset) in enumerate(keys):  # (owner: a module's index, or an agent's)
        if kind == FrameKind.NATIVE:
            by_module[owner].append(i)
        elif kind == FrameKind.RUNTIME:
            out[i] = _runtime_info(agent_names, agents, owner, address, offset)
        else:
            label = SYNTHETIC_LABELS.get(SyntheticFrame(address)) if address in _SYNTHETIC else None
            out[i] = FrameInfo(label or f"[{address}]")
    deadline = time.monotonic() + dwarf_budget
    notices: list[str] = []
    unnamed: dict[int, int] = {}
    dwarf = _DwarfFrames(deadline, notices)
    for mid, indexes in by_module.items():
        module = modules[mid] if 0 <= mid < len(modules) else None
        rels = [keys[i][2] for i in indexes]
        names, named = _symbol_names(module, objects.get(mid), rels)
        lines = dwarf.frames(objects.get(mid), rels)
        label = module_label(module) if module is not None else None
        for i, name, chain, has_name in zip(indexes, names, lines, named):
            if chain:
                out[i] = dataclasses.replace(chain[0], module=label)
                if len(chain) > 1:
                    inlined[i] = [dataclasses.replace(f, module=label) for f in chain[1:]]
            else:
                out[i] = FrameInfo(name, module=label)
                if not has_name and module is not None and module.file_backed:
                    unnamed[i] = mid
    infos = [f if f is not None else FrameInfo("[?]") for f in out]
    _mark_interpreter_frames(keys, modules, infos, inlined, agents)
    _mark_mechanics(keys, modules, infos, inlined, agents)
    mark_startup_frames(keys, modules, infos, agents)
    return Symbolized(infos, inlined, notices, unnamed)


def _symbol_names(module: Module | None, obj: ObjectFile | None, rels: list[int]) -> tuple[list[str], list[bool]]:
    """Symbol-table names (a function's, else an assembly label's, else ``name@plt`` in a PLT stub), or
    ``module+0xoffset`` where none covers the address: the offset of the function's start where the CFI
    delimits it, so that a stripped function is one frame, not one per address sampled in it (its top-table
    line was split into as many lines), else of the address itself. With them, whether each is a name."""
    symbols = obj.symbols if obj is not None else None
    hits = symbols.lookup_many(rels) if symbols is not None and len(symbols) else [None] * len(rels)
    if symbols is not None and None in hits:
        # a return address looked up one byte back (a caller's frame) that no symbol covers, while a function
        # starts right after it: a return address made up to enter that function, not one after a call
        # (glibc's makecontext pushes __start_context's address as the new context's return address)
        after = symbols.lookup_many([rel + 1 for rel in rels])
        hits = [hit if hit is not None or next_ is None or next_[1] != rel + 1 else next_
                for rel, hit, next_ in zip(rels, hits, after)]  # fmt: skip
    labels = symbols.label_many(rels) if symbols is not None and None in hits else [None] * len(rels)
    stubs: list[str | None] = [None] * len(rels)
    if obj is not None and any(h is None and c is None for h, c in zip(hits, labels)):
        stubs = obj.plt_stubs.name_many(rels)
    label = module_label(module)
    out = []
    for rel, hit, code_label, stub in zip(rels, hits, labels, stubs):
        if hit is not None:
            out.append(demangle(unversioned(hit[0])))
        elif code_label is not None:
            out.append(unversioned(code_label))
        elif stub is not None:
            out.append(f"{demangle(stub)}{PLT_SUFFIX}")  # as objdump and perf name a PLT stub
        elif module is None:
            out.append(f"0x{rel:x}")
        else:
            start = obj.function_start(rel) if obj is not None else None
            out.append(f"{label}+0x{rel if start is None else start:x}")
    named = [h is not None or c is not None or s is not None for h, c, s in zip(hits, labels, stubs)]
    return out, named


class _DwarfFrames:
    """Frames from DWARF, with one resolver per file for every module that maps it: each process of a
    recording with --subprocesses has its own modules, and 100 short children of one Python built 100
    resolvers of libpython's DWARF, each decoding the same units again (19.8 s after the recording,
    against 0.06 s for one process; a sweep)."""

    def __init__(self, deadline: float, notices: list[str]) -> None:
        self.deadline = deadline
        self.notices = notices  #: what could not be read is said here, once per file
        self._resolvers: dict[int, DwarfResolver | None] = {}  # id(ObjectFile) -> its resolver
        self._told: set[int] = set()

    def frames(self, obj: ObjectFile | None, rels: Sequence[int]) -> list[list[FrameInfo] | None]:
        """Per address, its frames from DWARF (outermost first), or None/[] where DWARF does not say."""
        if obj is None or time.monotonic() >= self.deadline:
            return [None] * len(rels)
        if id(obj) not in self._resolvers:
            self._resolvers[id(obj)] = dwarf_resolver(obj)
        resolver = self._resolvers[id(obj)]
        if resolver is None:
            return [None] * len(rels)
        frames = resolver.resolve(rels, deadline=self.deadline)
        problems = len(resolver.notes) + resolver.dropped_notes
        if problems and id(obj) not in self._told:
            self._told.add(id(obj))
            self.notices.append(f"{resolver.path}: {problems} part(s) of its DWARF could not be read, so "
                                "frames there may lack source lines or inlined calls (first: "
                                f"{resolver.notes[0]})")  # fmt: skip
        return frames


def dwarf_resolver(obj: ObjectFile) -> DwarfResolver | None:
    """The DWARF of ``obj``'s debug file, else of ``obj`` itself; None if neither has any."""
    elf = obj.debug_elf if obj.debug_elf is not None and has_debug_info(obj.debug_elf) else obj.elf
    if not has_debug_info(elf):
        return None
    try:
        return DwarfResolver(elf, obj.symbols, frame_cache=TableCache("frames"))
    except BinaryError:
        return None


def _runtime_info(
    agent_names: Sequence[str], agents: Mapping[str, AgentSession], agent_index: int, code: int, offset: int
) -> FrameInfo:
    name = agent_names[agent_index] if 0 <= agent_index < len(agent_names) else "?"
    agent = agents.get(name)
    if agent is None:
        return FrameInfo(f"[{name} 0x{code:x}]")
    return agent.describe(RuntimeFrame(code, offset, False))


def _mark_interpreter_frames(
    keys: Sequence[FrameKey],
    modules: Sequence[Module],
    infos: list[FrameInfo],
    inlined: dict[int, list[FrameInfo]],
    agents: Mapping[str, AgentSession],
) -> None:
    """Flag the native frames an agent calls its interpreter's own glue (for --hide-interpreter): by address
    for out-of-line frames, by name for the copies inlined into other functions and for the PLT stubs that
    lead to glue (``PyObject_Vectorcall@plt``: a shared libpython calls its own exported functions through
    its PLT, and no symbol covers a stub, so no address range holds it)."""
    glue_of = [a for a in agents.values() if isinstance(a, InterpreterGlue)]
    by_name = [a.is_interpreter_function for a in glue_of]
    if by_name:
        for i, chain in inlined.items():
            glue = [not f.interpreter and any(check(f.name) for check in by_name) for f in chain]
            if any(glue):
                inlined[i] = [dataclasses.replace(f, interpreter=True) if g else f for f, g in zip(chain, glue)]
    checks = [a.is_interpreter_frame for a in glue_of]
    if not checks and not by_name:
        return
    for i, info in enumerate(infos):
        kind, mid, rel, _offset = keys[i]
        if kind != FrameKind.NATIVE or info.interpreter:
            continue
        if info.name.endswith(PLT_SUFFIX):  # no function's range holds a stub: its target's name decides
            is_glue = any(check(info.name.removesuffix(PLT_SUFFIX)) for check in by_name)
        else:
            if not 0 <= mid < len(modules):
                continue
            frame = NativeFrame(mid, rel, rel + modules[mid].bias, UnwindMethod.IP)
            is_glue = any(check(frame) for check in checks)
        if is_glue:
            infos[i] = dataclasses.replace(info, interpreter=True)


def _mark_mechanics(
    keys: Sequence[FrameKey],
    modules: Sequence[Module],
    infos: list[FrameInfo],
    inlined: dict[int, list[FrameInfo]],
    agents: Mapping[str, AgentSession],
) -> None:
    """Give the native frames, and the calls inlined at them, the runtime mechanism (GIL, garbage collector,
    import) an agent says their function is part of, for the summary table's lines (``tree/mechanics.py``).
    Asked once per unique frame, by its address and each function's name there."""
    askers = [a.mechanism for a in agents.values() if isinstance(a, RuntimeMechanics)]
    if not askers:
        return
    for i, info in enumerate(infos):
        kind, mid, rel, _offset = keys[i]
        if kind != FrameKind.NATIVE or not 0 <= mid < len(modules):
            continue
        frame = NativeFrame(mid, rel, rel + modules[mid].bias, UnwindMethod.IP)
        own = _mechanism(askers, frame, info.name)
        if own is not None:
            infos[i] = dataclasses.replace(info, mechanism=own)
        chain = inlined.get(i)
        if chain:
            found = [_mechanism(askers, frame, f.name) for f in chain]
            if any(m is not None for m in found):
                inlined[i] = [dataclasses.replace(f, mechanism=m) if m is not None else f for f, m in zip(chain, found)]


def _mechanism(askers: Sequence[Callable[[NativeFrame, str], Mechanism | None]], frame: NativeFrame,
               name: str) -> Mechanism | None:  # fmt: skip
    for ask in askers:
        found = ask(frame, name)
        if found is not None:
            return found
    return None
