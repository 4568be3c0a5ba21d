"""Readable names for mangled symbols, through one entry point, ``demangle(name)``:

* Rust v0 (``_R...``, RFC 2603): ``rust_v0``, written here because neither libstdc++'s ``__cxa_demangle``
  (which ``cxxfilt`` wraps) nor any installed crate knows it; rustc 1.95 uses it for its own crates.
* Rust legacy (``_ZN...17h<16 hex digits>E``): Itanium-shaped, but with ``$LT$``-style escapes for the
  characters Itanium names cannot hold and a hash as the last component. Decoded here the way
  rustc-demangle's alternate form prints it (hash dropped), as ``nm -C`` does.
* C++ (Itanium ABI, ``_Z...``) through ``cxxfilt``.

A suffix that compilers append to a mangled name (gcc clones ``foo.cold``, ``foo.part.0``,
``foo.constprop.0``) is kept after the demangled name, except LLVM's LTO uniquifier ``.llvm.<digits>`` on
Rust names, which rustc-demangle and ``nm -C`` drop. Anything that does not demangle is returned
unchanged.
"""

from __future__ import annotations

import functools
import re

from profiler.symbolize.rust_v0 import Invalid, demangle_v0

try:
    import cxxfilt
except ImportError:  # pragma: no cover - cxxfilt is a declared dependency; degrade to raw names
    cxxfilt = None

#: <length><text> components of an Itanium nested name (Itanium C++ ABI, "<source-name>")
_COMPONENT = re.compile(r"(\d{1,9})")
#: rustc legacy mangling: the last component is "h" followed by a 64-bit hash in 16 hex digits
_RUST_HASH = re.compile(r"h[0-9a-f]{16}")
#: legacy escapes (rustc-demangle, legacy.rs): $SP$ @, $BP$ *, $RF$ &, $LT$ <, $GT$ >, $LP$ (, $RP$ ),
#: $C$ ",", and $u<hex>$ for any other character
_ESCAPES = {"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ","}
_ESCAPE = re.compile(r"\$(SP|BP|RF|LT|GT|LP|RP|C|u[0-9a-f]{1,6})\$")
#: LLVM's suffix for symbols it renamed during LTO (rustc-demangle, lib.rs: ".llvm." then hex digits/"@")
_LLVM_SUFFIX = re.compile(r"\.llvm\.[0-9A-F@]+")
#: more components than this in one legacy name is not a real symbol
MAX_COMPONENTS = 256


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    legacy = _rust_legacy(name) if name.startswith("_ZN") else None
    if legacy is not None:  # its components may contain ".." (the escape of "::"): split after the "E"
        text, suffix = legacy
    else:
        base, dot, rest = name.partition(".")  # v0 and Itanium names contain no "."
        suffix = dot + rest
        demangled = _demangle_v0_or_itanium(base)
        if demangled is None:
            return name
        text = demangled
    if (legacy is not None or name.startswith("_R")) and _LLVM_SUFFIX.fullmatch(suffix):
        suffix = ""  # Rust only: rustc-demangle drops LLVM's LTO uniquifier
    return text + suffix


def _demangle_v0_or_itanium(base: str) -> str | None:
    if base.startswith("_R"):
        try:
            return demangle_v0(base)
        except Invalid:
            return None
    if base.startswith("_Z") and cxxfilt is not None:
        try:
            demangled: str = cxxfilt.demangle(base)
            return demangled
        except cxxfilt.InvalidName:
            return None
    return None


def _rust_legacy(symbol: str) -> tuple[str, str] | None:
    """(demangled, suffix) of ``_ZN`` <length><component>... ``E`` [suffix] whose last component is a
    Rust hash; None otherwise."""
    components: list[str] = []
    i = 3
    while len(components) < MAX_COMPONENTS:
        if symbol.startswith("E", i):
            break
        digits = _COMPONENT.match(symbol, i)
        if digits is None:
            return None
        start = digits.end()
        stop = start + int(digits.group(1))
        if stop > len(symbol):
            return None
        components.append(symbol[start:stop])
        i = stop
    suffix = symbol[i + 1 :]
    if not symbol.startswith("E", i) or (suffix and not suffix.startswith(".")):
        return None
    if len(components) < 2 or not _RUST_HASH.fullmatch(components[-1]):
        return None
    return "::".join(_unescape(c) for c in components[:-1]), suffix


def _unescape(component: str) -> str:
    if component.startswith("_$"):  # a leading "_" protects a component that starts with "$"
        component = component[1:]
    text = _ESCAPE.sub(_escape_char, component)
    return text.replace("..", "::")


def _escape_char(match: re.Match[str]) -> str:
    code = match.group(1)
    if code in _ESCAPES:
        return _ESCAPES[code]
    value = int(code[1:], 16)
    return chr(value) if value <= 0x10FFFF else match.group(0)
