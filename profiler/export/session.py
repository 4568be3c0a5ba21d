"""The .nprof session file as an output format (the file format itself lives in profile/session.py)."""

from __future__ import annotations

import io

from profiler.config import ExportConfig
from profiler.export.base import Exporter
from profiler.profile.session import Session


class SessionExporter(Exporter):
    format = "nprof"
    extensions = (".nprof",)

    def render(self, session: Session, config: ExportConfig) -> bytes:
        buffer = io.BytesIO()
        session.write_to(buffer)
        return buffer.getvalue()
