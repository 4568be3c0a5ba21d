"""Find the separate debug file of an ELF file, the way GDB does (GDB manual, "Debugging Information in
Separate Files"):

1. by build-id: ``<debug dir>/.build-id/xx/yyyy….debug``, where ``xx`` is the first byte of the build-id
   in hex and ``yyyy…`` the rest;
2. by ``.gnu_debuglink`` (a file name and the CRC32 of the debug file): in the file's own directory, in
   ``.debug/`` beside it, and under ``<debug dir>/<the file's directory>/``. A candidate counts only if
   its CRC32 matches, so a stale debug file of another build is never paired with the binary.

Paths are looked up under ``root`` first (``/proc/PID/root`` for a target in another mount namespace,
whose debug files live in its own filesystem), then on the host (``/``), where debug packages for the
same build-ids may be installed. Last, by build-id, in debuginfod's client cache, where
``debuginfod-find debuginfo BUILD-ID`` (and gdb, with ``DEBUGINFOD_URLS`` set) puts what a debuginfod
server has: ``<cache>/<build-id>/debuginfo`` (debuginfod-find(1), "CACHE"). Pure file-system work, no pid.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping

#: the global debug directory of Debian/Fedora/GDB defaults
DEFAULT_DEBUG_DIRS = ("/usr/lib/debug",)
#: a debug file larger than this is not read for its CRC (nothing real comes close)
MAX_DEBUG_FILE = 4 << 30
_CHUNK = 1 << 20


def build_id_paths(build_id: str, debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS) -> list[str]:
    """``<dir>/.build-id/xx/yyyy.debug`` for each debug dir (paths inside the target's namespace)."""
    build_id = build_id.lower()
    if len(build_id) < 4 or any(c not in "0123456789abcdef" for c in build_id):
        return []
    return [os.path.join(d, ".build-id", build_id[:2], build_id[2:] + ".debug") for d in debug_dirs]


def debuginfod_path(build_id: str, env: Mapping[str, str] = os.environ) -> str | None:
    """Where debuginfod's client keeps the debug file of ``build_id`` once fetched: ``$DEBUGINFOD_CACHE_PATH``,
    else ``$XDG_CACHE_HOME/debuginfod_client``, else ``~/.cache/debuginfod_client`` (debuginfod-find(1)),
    then ``<build-id>/debuginfo``. None for a build-id that is not hex."""
    build_id = build_id.lower()
    if len(build_id) < 4 or any(c not in "0123456789abcdef" for c in build_id):
        return None
    cache = env.get("DEBUGINFOD_CACHE_PATH")
    if not cache:
        xdg = env.get("XDG_CACHE_HOME")
        cache = os.path.join(xdg or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache"),
                             "debuginfod_client")  # fmt: skip
    return os.path.join(cache, build_id, "debuginfo")


def debuglink_paths(path: str, name: str, debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS) -> list[str]:
    """Where GDB looks for a ``.gnu_debuglink`` name, for a file at ``path`` (in the target's namespace)."""
    if not name or "/" in name or name in (".", ".."):
        return []
    directory = os.path.dirname(path)
    found = [os.path.join(directory, name), os.path.join(directory, ".debug", name)]
    found += [os.path.join(d + directory, name) for d in debug_dirs]
    return found


def crc32_of_file(path: str) -> int | None:
    """The CRC32 ``.gnu_debuglink`` records (the same polynomial as zlib's), or None if unreadable."""
    crc = 0
    try:
        if os.path.getsize(path) > MAX_DEBUG_FILE:
            return None
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return None
    return crc


def find_debug_file(
    path: str,
    build_id: str | None,
    debuglink: tuple[str, int] | None,
    root: str = "/",
    debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS,
    target_root: str | None = None,
) -> str | None:
    """The host path of the debug file of the file the target sees at ``path``, or None.

    ``root`` is the prefix that makes a target path openable here (``/proc/PID/root`` or ``/``).
    ``target_root``: the target's own root directory (``/proc/PID/root``), looked in after ``root`` where it
    differs: a chroot'ed process's maps name its files by their paths here (the chroot's directory
    included), so ``root`` is ``/``, and its debug packages are installed under its own root. The caller
    should still check that the debug file's build-id matches, when there is one.
    """
    roots = [root]
    for extra in (target_root, "/"):
        if extra is not None and all(os.path.normpath(extra) != os.path.normpath(r) for r in roots):
            roots.append(extra)
    own = _host(root, path)
    for r in roots:
        for candidate in build_id_paths(build_id, debug_dirs) if build_id else []:
            host = _host(r, candidate)
            if os.path.isfile(host):
                return host
    fetched = debuginfod_path(build_id) if build_id else None
    if fetched is not None and os.path.isfile(fetched):
        return fetched
    if debuglink is None:
        return None
    name, crc = debuglink
    for r in roots:
        for candidate in debuglink_paths(path, name, debug_dirs):
            host = _host(r, candidate)
            if host != own and os.path.isfile(host) and crc32_of_file(host) == crc:
                return host
    return None


def _host(root: str, path: str) -> str:
    return os.path.normpath(root.rstrip("/") + "/" + path.lstrip("/"))
