"""The exporter protocol, the registry of formats, and the atomic write every output goes through."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Protocol

from profiler.atomic import is_stream, write_output
from profiler.config import ExportConfig
from profiler.errors import UsageError
from profiler.profile.session import Session


class Exporter(Protocol):
    """An output format. Each exporter subclasses this explicitly, so that it inherits ``pieces``."""

    #: the name used with -f/--format
    format: str
    #: file name endings that select this format, longest first when they overlap
    extensions: tuple[str, ...]

    def render(self, session: Session, config: ExportConfig) -> bytes | bytearray:
        """The whole output file (a ``bytearray`` where it was built in place, not copied into ``bytes``).
        Needs a symbolized session (``session.frame_info``)."""
        ...

    def pieces(self, session: Session, config: ExportConfig) -> Iterator[bytes | bytearray]:
        """The file as pieces in order, which ``write`` writes as they come: the whole file as one here. An
        exporter whose file is large overrides it, so that it never holds all of it at once (folded)."""
        yield self.render(session, config)


def exporters() -> dict[str, Exporter]:
    from profiler.export.folded import FoldedExporter
    from profiler.export.session import SessionExporter
    from profiler.export.speedscope import SpeedscopeExporter

    return {e.format: e for e in (SpeedscopeExporter(), FoldedExporter(), SessionExporter())}


def infer_format(path: str, requested: str | None) -> Exporter:
    """The exporter for ``-f`` if given, else for the output file's extension, else for standard output or a
    device (``atomic.is_stream``), which has none, the default format."""
    known = exporters()
    names = ", ".join(sorted(known))
    if requested is None:
        name = os.path.basename(path).lower()
        matches = [(len(ext), e) for e in known.values() for ext in e.extensions if name.endswith(ext)]
        if matches:
            return max(matches, key=lambda m: m[0])[1]
        if not is_stream(path):
            endings = ", ".join(ext for e in known.values() for ext in e.extensions)
            raise UsageError(
                f"Cannot tell the output format of {path!r} from its extension.",
                f"Use one of the endings {endings}, or give -f/--format ({names}).",
            )
        requested = "speedscope"
    exporter = known.get(requested.lower())
    if exporter is None:
        raise UsageError(f"Unknown output format {requested!r}.", f"Choose one of: {names}.")
    return exporter


def write(session: Session, path: str, exporter: Exporter, config: ExportConfig) -> None:
    """Render the session in ``exporter``'s format to ``path`` (``atomic.write_output``: ``-`` is standard
    output), piece by piece where the exporter makes it so."""
    write_output(path, exporter.pieces(session, config))
