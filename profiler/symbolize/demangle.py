"""Readable names for mangled symbols: C++ (Itanium ABI) through ``cxxfilt`` (libstdc++'s __cxa_demangle),
and Rust's legacy mangling, which is Itanium-shaped with a trailing ``::h<16 hex digits>`` hash.
"""

from __future__ import annotations

import functools
import re

try:
    import cxxfilt
except ImportError:  # pragma: no cover - cxxfilt is a declared dependency; degrade to raw names
    cxxfilt = None

# rustc legacy symbol mangling: the last path component is "h" followed by a 64-bit hash in hex
_RUST_LEGACY_HASH = re.compile(r"::h[0-9a-f]{16}$")


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    if not name.startswith("_Z") or cxxfilt is None:
        return name
    base, dot, suffix = name.partition(".")  # gcc clones: foo.cold, foo.part.0, foo.constprop.0
    try:
        text = cxxfilt.demangle(base)
    except cxxfilt.InvalidName:
        return name
    text = _RUST_LEGACY_HASH.sub("", text)
    return f"{text}.{suffix}" if dot else text
