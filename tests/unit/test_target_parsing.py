"""Parsing of /proc files and ptrace wait statuses."""

from __future__ import annotations

import os
import signal

from agents.cpython.detect import interpreter_mapping
from profiler.target import ptrace as pt
from profiler.target.eligibility import foreign_architecture
from profiler.target.maps import MappingIndex, parse_maps
from profiler.target.procfs import printable, split_stat
from tests.support.elf32 import i386_pause_binary

MAPS = """\
55d0c4a00000-55d0c4a01000 r--p 00000000 fe:01 1234   /usr/bin/prog
55d0c4a01000-55d0c4a02000 r-xp 00001000 fe:01 1234   /usr/bin/prog
7f0000000000-7f0000001000 ---p 00000000 00:00 0
7f0000001000-7f0000801000 rw-p 00000000 00:00 0
7f0000801000-7f0000802000 rw-p 00000000 00:00 0      [anon:x]
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0      [vdso]
7f1111111000-7f1111112000 r-xp 00000000 fe:01 99     /tmp/lib with space.so (deleted)
"""


def test_maps_parse_and_lookup():
    index = MappingIndex(parse_maps(MAPS))
    m = index.find(0x55D0C4A01800)
    assert m is not None and m.executable and m.path == "/usr/bin/prog" and m.offset == 0x1000
    assert index.find(0x7F0000000800).perms == "---p"
    assert index.find(0x10) is None
    deleted = index.find(0x7F1111111000)
    assert deleted.deleted and deleted.path == "/tmp/lib with space.so (deleted)"


def test_stack_region_ends_at_the_mapping_not_the_guard():
    index = MappingIndex(parse_maps(MAPS))
    assert index.region_end(0x7FFD00000100) == 0x7FFD00021000
    # a thread stack: stops where the next mapping has another name
    assert index.region_end(0x7F0000001000) == 0x7F0000801000
    assert index.region_end(0x7F0000000800) is None  # the guard page is not readable


def test_stat_split_survives_parentheses_in_comm():
    fields = split_stat("123 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 999 rest")
    assert fields[1] == "123" and fields[2] == "a) b (c)" and fields[3] == "R" and fields[22] == "999"


def test_wait_status_decoding():
    interrupt_stop = 0x80057F  # measured: PTRACE_EVENT_STOP << 16 | SIGTRAP << 8 | 0x7f
    assert pt.is_stopped(interrupt_stop)
    assert pt.decode_stop(interrupt_stop) == (signal.SIGTRAP, pt.PTRACE_EVENT_STOP)
    signal_stop = (signal.SIGALRM << 8) | 0x7F
    assert pt.decode_stop(signal_stop) == (signal.SIGALRM, 0)
    assert not pt.is_stopped(0)  # exited with status 0


def test_foreign_architecture_is_named():
    assert foreign_architecture(i386_pause_binary()[:20]) == "a 32-bit i386 executable"
    with open("/proc/self/exe", "rb") as f:
        assert foreign_architecture(f.read(20)) is None
    assert foreign_architecture(b"#!/bin/sh\n") is None


class MappedProcess:
    """Stands in for a TargetProcess: only the maps and the executable that ``interpreter_mapping`` reads."""

    def __init__(self, maps: str, exe: str) -> None:
        self.maps = MappingIndex(parse_maps(maps))
        self.exe = exe


LIBPYTHON_READ_ONLY = "7f2000000000-7f2001000000 r--s 00000000 fe:01 77     /opt/py312/lib/libpython3.12.so.1.0\n"
LIBPYTHON_LOADED = """\
7f3000000000-7f3000100000 r--p 00000000 fe:01 66     /opt/py311/lib/libpython3.11.so.1.0
7f3000100000-7f3000400000 r-xp 00100000 fe:01 66     /opt/py311/lib/libpython3.11.so.1.0
7f3000400000-7f3000500000 r--p 00400000 fe:01 66     /opt/py311/lib/libpython3.11.so.1.0
"""


def test_the_interpreter_is_the_libpython_that_is_loaded_not_one_mapped_to_be_read():
    # a libpython mapped only to be read comes first in address order; the loaded one is its executable part
    process = MappedProcess(MAPS + LIBPYTHON_READ_ONLY + LIBPYTHON_LOADED, "/opt/py311/bin/python3.11")
    m = interpreter_mapping(process)  # type: ignore[arg-type]
    assert m is not None and m.path == "/opt/py311/lib/libpython3.11.so.1.0" and m.executable


def test_a_native_process_that_maps_libpython_to_read_it_is_judged_by_its_executable():
    # the executable is the candidate (the caller then finds it exports no _PyRuntime), not the libpython
    m = interpreter_mapping(MappedProcess(MAPS + LIBPYTHON_READ_ONLY, "/usr/bin/prog"))  # type: ignore[arg-type]
    assert m is not None and m.path == "/usr/bin/prog"


def test_a_static_python_is_found_by_its_executable_mapping():
    static = MAPS.replace("/usr/bin/prog", "/usr/bin/python3.11")
    m = interpreter_mapping(MappedProcess(static + LIBPYTHON_READ_ONLY, "/usr/bin/python3.11"))  # type: ignore[arg-type]
    assert m is not None and m.path == "/usr/bin/python3.11" and m.executable


def test_a_newline_in_a_mapped_path_is_unescaped():
    """The kernel writes a newline in a maps path as \\012: the path must be the file's, to be opened."""
    [m] = parse_maps("7f00-7f01 r-xp 00000000 08:01 123 /tmp/new\\012line/lib.so\n")
    assert m.path == "/tmp/new\nline/lib.so"


def test_a_path_not_in_utf8_opens_and_prints():
    """A maps path keeps its bytes (``os.fsdecode``: a lone surrogate for each byte not in UTF-8), so it opens;
    ``printable`` gives the text that outputs can hold, which orjson and UTF-8 streams refuse otherwise."""
    path = os.fsdecode(b"/opt/caf\xe9/lib.so")
    assert os.fsencode(path) == b"/opt/caf\xe9/lib.so"
    assert printable(path) == "/opt/caf\ufffd/lib.so"
    assert printable("/opt/café/lib.so") == "/opt/café/lib.so"  # UTF-8 as it is
