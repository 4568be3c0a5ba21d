"""The names of a recording's frames, put in its profile at the end: each frame not named yet is resolved
once (``symbolize.symbolize``), and what the user must be told about the names is said once."""

from __future__ import annotations

from collections.abc import Mapping

from profiler.binary.objfile import ObjectFile
from profiler.config import ExportConfig
from profiler.profile.session import Session
from profiler.runtime import AgentSession
from profiler.symbolize.stripped import missing_symbol_notices
from profiler.symbolize.symbolizer import symbolize
from profiler.target.procfs import printable


def name_frames(
    session: Session,
    objects: Mapping[int, ObjectFile],
    agents: Mapping[str, AgentSession] | None = None,
    shown: ExportConfig | None = None,
) -> list[str]:
    """Name the frames of ``session`` not named yet, so exporters and the session file see names. Returns
    what the user must be told (files whose DWARF could not be read whole; modules whose functions without
    a name much of the profile ran in, of the samples ``shown``, and what names them), also kept in the
    session's notices."""
    known = len(session.frame_info or [])
    columns = session.frames.columns()
    kinds, modules, addresses, offsets = (columns[k][known:].tolist() for k in ("kind", "module", "address", "offset"))
    result = symbolize(list(zip(kinds, modules, addresses, offsets)), session.modules, session.agents, objects,
                       agents)  # fmt: skip
    session.frame_info = [*(session.frame_info or []), *result.frames]
    session.inlined.update({known + i: chain for i, chain in result.inlined.items()})
    unnamed = {known + i: module for i, module in result.unnamed.items()}
    missing = missing_symbol_notices(session, unnamed, objects, shown)
    notices = [printable(n) for n in result.notices + missing]  # they name files, by paths from the maps
    session.meta.notices.extend(notices)
    return notices
