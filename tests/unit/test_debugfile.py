"""Separate debug files: by build-id, by .gnu_debuglink with its CRC, inside a target's root (issue 3);
and what ``ObjectFile`` takes from them (.symtab names, .debug_frame)."""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from profiler.binary.cache import TableCache
from profiler.binary.debugfile import (
    build_id_paths,
    crc32_of_file,
    debuginfod_path,
    debuglink_paths,
    find_debug_file,
)  # fmt: skip
from profiler.binary.objfile import ObjectFileCache
from tests.support.targets import build_c

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
CHAIN_C = Path(__file__).resolve().parents[1] / "targets" / "chain.c"


def test_build_id_path_layout() -> None:
    assert build_id_paths("93AC61ec") == ["/usr/lib/debug/.build-id/93/ac61ec.debug"]
    assert build_id_paths("../etc") == []


def test_debuglink_search_order() -> None:
    assert debuglink_paths("/usr/lib/libfoo.so.1", "libfoo.debug") == [
        "/usr/lib/libfoo.debug",
        "/usr/lib/.debug/libfoo.debug",
        "/usr/lib/debug/usr/lib/libfoo.debug",
    ]
    assert debuglink_paths("/usr/lib/libfoo.so.1", "../../etc/passwd") == []


def place(root: Path, path: str, data: bytes) -> None:
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(data)


def test_build_id_is_found_under_the_target_root_first(tmp_path: Path) -> None:
    place(tmp_path, "/usr/lib/debug/.build-id/ab/cdef.debug", b"x")
    found = find_debug_file("/usr/lib/libfoo.so", "abcdef", None, root=str(tmp_path))
    assert found == str(tmp_path / "usr/lib/debug/.build-id/ab/cdef.debug")


def test_a_debug_file_fetched_by_debuginfod_is_found_in_its_cache(tmp_path: Path, monkeypatch) -> None:
    """What the stripped-modules notice advises (``debuginfod-find debuginfo BUILD-ID``, with DEBUGINFOD_URLS
    set) names the functions: the fetched file is looked for where debuginfod's client keeps it."""
    assert debuginfod_path("ABcdef", {"DEBUGINFOD_CACHE_PATH": "/c"}) == "/c/abcdef/debuginfo"
    assert debuginfod_path("abcdef", {"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == "/x/debuginfod_client/abcdef/debuginfo"
    assert debuginfod_path("abcdef", {"HOME": "/h"}) == "/h/.cache/debuginfod_client/abcdef/debuginfo"
    assert debuginfod_path("../etc", {"HOME": "/h"}) is None
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(tmp_path / "cache"))
    assert find_debug_file("/usr/lib/libfoo.so", "abcdef", None, root=str(tmp_path)) is None
    place(tmp_path, "/cache/abcdef/debuginfo", b"x")
    assert find_debug_file("/usr/lib/libfoo.so", "abcdef", None, root=str(tmp_path)) == str(
        tmp_path / "cache/abcdef/debuginfo"
    )


def test_debuglink_candidates_must_match_the_crc(tmp_path: Path) -> None:
    good, stale = b"the right debug file", b"a debug file of another build"
    place(tmp_path, "/usr/lib/libfoo.debug", stale)  # next to the file: wrong CRC, skipped
    place(tmp_path, "/usr/lib/.debug/libfoo.debug", good)
    link = ("libfoo.debug", zlib.crc32(good))
    found = find_debug_file("/usr/lib/libfoo.so", None, link, root=str(tmp_path))
    assert found == str(tmp_path / "usr/lib/.debug/libfoo.debug")
    assert crc32_of_file(found) == zlib.crc32(good)


def test_debuglink_under_the_global_debug_directory(tmp_path: Path) -> None:
    data = b"global"
    place(tmp_path, "/usr/lib/debug/opt/app/libfoo.debug", data)
    found = find_debug_file("/opt/app/libfoo.so", None, ("libfoo.debug", zlib.crc32(data)), root=str(tmp_path))
    assert found == str(tmp_path / "usr/lib/debug/opt/app/libfoo.debug")


def test_a_debuglink_naming_the_file_itself_is_ignored(tmp_path: Path) -> None:
    data = b"the binary itself"
    place(tmp_path, "/opt/libfoo.so", data)
    assert find_debug_file("/opt/libfoo.so", None, ("libfoo.so", zlib.crc32(data)), root=str(tmp_path)) is None


@pytest.mark.skipif(not os.path.exists(LIBC), reason="needs this machine's libc")
def test_host_debug_directory_is_the_fallback_for_a_target_root(tmp_path: Path) -> None:
    """A container root without debug packages still finds the host's libc6-dbg by build-id."""
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(LIBC, LIBC)
    if obj.debug_elf is None:
        pytest.skip("libc6-dbg is not installed")
    found = find_debug_file(LIBC, obj.build_id, obj.elf.debuglink, root=str(tmp_path))
    assert found == obj.debug_elf.path


@pytest.mark.skipif(not os.path.exists(LIBC), reason="needs this machine's libc")
def test_libc_static_functions_come_from_the_debug_files_symtab() -> None:
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(LIBC, LIBC)
    if obj.debug_elf is None:
        pytest.skip("libc6-dbg is not installed")
    symbols = obj.symbols
    assert symbols is not None and symbols.source.endswith(":.symtab")
    start, _size = symbols.address_of("msort_with_tmp.part.0") or (0, 0)
    assert symbols.lookup(start + 4)[0] == "msort_with_tmp.part.0"  # type: ignore[index]
    assert symbols.address_of("__libc_start_call_main") is not None


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("objcopy") is None, reason="needs binutils + gcc")
def test_debug_frame_of_a_separate_debug_file_is_used(tmp_path: Path) -> None:
    """A stripped binary whose only CFI is .debug_frame in a (compressed) debug file beside it."""
    binary = Path(build_c(str(CHAIN_C), str(tmp_path), ["-O2", "-g", "-fno-asynchronous-unwind-tables"]))
    debug = tmp_path / "chain.debug"
    keep_debug = ["--only-keep-debug", "--compress-debug-sections=zlib"]
    subprocess.run(["objcopy", *keep_debug, str(binary), str(debug)], check=True)
    strip = ["--strip-debug", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr",
             "--remove-section=.note.gnu.build-id", f"--add-gnu-debuglink={debug}"]  # fmt: skip
    subprocess.run(["objcopy", *strip, str(binary)], check=True)
    obj = ObjectFileCache(TableCache("cfi", enabled=False)).open(str(binary), str(binary))
    assert obj.unwind_table is None  # the stripped file itself has no CFI left
    main = obj.symbols.address_of("main")  # type: ignore[union-attr]
    assert main is not None and obj.unwind_rule(main[0]) is not None
    assert obj.debug_elf is not None and obj.debug_elf.path == str(debug)
    table = obj.debug_unwind_table
    assert table is not None and [s.origin for s in table.sources] == [f"{debug}:.debug_frame"]
