"""Frame ids -> names, files and lines, once per unique frame, at the end of a recording (DESIGN.md section
2, rule 2: addresses in, names later).

Native frames are resolved per module in one batched ``searchsorted`` over its symbol table. Frames whose
module has no symbol covering the address show as ``module+0xoffset`` so they can still be looked up by
hand (``addr2line -e module 0xoffset``).
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Mapping

from profiler.binary.objfile import ObjectFile
from profiler.model import FrameInfo, FrameKind, Module, NativeFrame, RuntimeFrame, UnwindMethod
from profiler.runtime import AgentSession
from profiler.sampling.session import Session
from profiler.symbolize.demangle import demangle


def unversioned(name: str) -> str:
    """``__libc_start_main@@GLIBC_2.34`` -> ``__libc_start_main``: .symtab keeps GNU symbol-version
    suffixes ("@" or "@@" then the version node), which are not part of the function's name."""
    at = name.find("@")
    return name[:at] if at > 0 else name


def module_label(module: Module | None) -> str:
    if module is None:
        return "[unknown]"
    return os.path.basename(module.path) if module.file_backed else module.path


def symbolize(
    session: Session,
    objects: Mapping[int, ObjectFile],
    agents: Mapping[str, AgentSession] | None = None,
) -> list[FrameInfo]:
    """Resolve every frame of ``session`` (frames already resolved keep their names)."""
    cols = session.frames.columns()
    kinds, modules, addresses, offsets = (cols[k] for k in ("kind", "module", "address", "offset"))
    n = len(kinds)
    known = session.frame_info or []
    out: list[FrameInfo | None] = list(known) + [None] * (n - len(known))
    by_module: dict[int, list[int]] = defaultdict(list)
    for fid in range(len(known), n):
        kind = int(kinds[fid])
        if kind == FrameKind.NATIVE:
            by_module[int(modules[fid])].append(fid)
        elif kind == FrameKind.RUNTIME:
            out[fid] = _runtime_info(
                session, agents or {}, int(modules[fid]), int(addresses[fid]), int(offsets[fid])
            )
        else:
            out[fid] = FrameInfo(f"[{int(addresses[fid])}]")
    for mid, fids in by_module.items():
        module = session.modules[mid] if 0 <= mid < len(session.modules) else None
        label = module_label(module)
        obj = objects.get(mid)
        symbols = obj.symbols if obj is not None else None
        rels = addresses[fids]
        hits = symbols.lookup_many(rels) if symbols is not None and len(symbols) else [None] * len(fids)
        for fid, rel, hit in zip(fids, rels.tolist(), hits):
            if hit is not None:
                out[fid] = FrameInfo(demangle(unversioned(hit[0])), module=label)
            elif module is None:
                out[fid] = FrameInfo(f"0x{rel:x}")
            else:
                out[fid] = FrameInfo(f"{label}+0x{rel:x}", module=label)
    infos = [f if f is not None else FrameInfo("[?]") for f in out]
    _mark_interpreter_frames(session, infos, agents or {}, kinds, modules, addresses)
    return infos


def _mark_interpreter_frames(
    session: Session,
    infos: list[FrameInfo],
    agents: Mapping[str, AgentSession],
    kinds: object,
    modules: object,
    addresses: object,
) -> None:
    """Flag the native frames an agent calls its interpreter's own glue (for --hide-interpreter)."""
    checks = [a.is_interpreter_frame for a in agents.values() if hasattr(a, "is_interpreter_frame")]
    if not checks:
        return
    for fid, info in enumerate(infos):
        if int(kinds[fid]) != FrameKind.NATIVE or info.interpreter:
            continue
        mid, rel = int(modules[fid]), int(addresses[fid])
        if not 0 <= mid < len(session.modules):
            continue
        avma = rel + session.modules[mid].bias
        frame = NativeFrame(mid, rel, avma, UnwindMethod.IP)
        if any(check(frame) for check in checks):
            infos[fid] = dataclasses.replace(info, interpreter=True)


def _runtime_info(
    session: Session, agents: Mapping[str, AgentSession], agent_index: int, code: int, offset: int
) -> FrameInfo:
    name = session.agents[agent_index] if 0 <= agent_index < len(session.agents) else "?"
    agent = agents.get(name)
    if agent is None:
        return FrameInfo(f"[{name} 0x{code:x}]")
    return agent.describe(RuntimeFrame(code, offset, False))


def resolve(
    session: Session, objects: Mapping[int, ObjectFile], agents: Mapping[str, AgentSession] | None = None
) -> None:
    """Symbolize in place, so exporters and the session file see names."""
    session.frame_info = symbolize(session, objects, agents)

