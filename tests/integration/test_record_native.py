"""`nprof record` on real native targets built by the tests, with frame pointers: the stacks are exact."""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter

import pytest
from elftools.elf.elffile import ELFFile

from profiler.binary.elf import ElfFile
from profiler.binary.minidebug import mini_debuginfo
from profiler.binary.objfile import ObjectFile
from profiler.model import StopReason
from profiler.profile.session import Session
from profiler.symbolize.stripped import _package_of
from profiler.target import procfs
from tests.support.profiles import ThreadProfile, dumped_threads, ends_with, read_speedscope, share
from tests.support.targets import (
    FRAME_POINTERS,
    NO_FRAME_POINTERS,
    NOT_UTF8_NAME,
    assert_running_free,
    build_c,
    nprof_command,
    record,
    run_nprof,
    run_nprof_without_map_files,
    running_target,
    stop,
    thread_states,
    wait_until,
)  # fmt: skip

DEPTH = 24  # recursion levels of chain.c, 512 bytes of locals each: > 12 KiB of stack


def test_known_chain_is_exact(chain_fp, tmp_path):
    out = str(tmp_path / "chain.speedscope.json")
    with running_target([chain_fp, str(DEPTH)]) as target:
        run = record(target.pid, out)
        assert_running_free(target.pid)
    [profile] = read_speedscope(out)
    leaf = {s: w for s, w in profile.stacks.items() if s[-1] == "spin"}
    chain = ("main", "a", "b", "c", "spin")
    recursion = ("main", *(["recurse"] * DEPTH), "spin")

    def exact(stack: tuple[str, ...]) -> bool:
        # the whole chain from main, with nothing missing or extra between main and the leaf
        for expected in (chain, recursion):
            if ends_with(stack, expected) and "main" not in stack[: -len(expected)]:
                return True
        return False

    hit, total = share(leaf, exact)
    assert total > 0.3 * sum(profile.stacks.values()), "the target spends most of its time in spin"
    assert hit / total >= 0.95, f"only {hit / total:.1%} of leaf samples show the exact chain"
    deep = sum(w for s, w in leaf.items() if ends_with(s, recursion))
    assert deep > 0, "no sample shows the complete recursion"
    assert "Top functions" in run.stderr and "spin" in run.stderr


def test_a_program_under_a_path_not_in_utf8(tmp_path):
    """The maps give a path as bytes. Decoded with U+FFFD for a byte not in UTF-8, the path did not open,
    and a user without map_files access saw every frame of a program in a Latin-1 directory as a bare
    address ("chain+0x1237"). Paths are kept as the file system has them, and shown with U+FFFD. Built
    without a build-id, the program's cached tables are keyed by its path."""
    directory = tmp_path / NOT_UTF8_NAME
    directory.mkdir()
    binary = build_c("chain.c", str(directory), (*FRAME_POINTERS, "-Wl,--build-id=none"))
    out = str(tmp_path / "chain.speedscope.json")
    with running_target([str(binary), str(DEPTH)]) as target:
        result = run_nprof_without_map_files("record", "--pid", str(target.pid), "-d", "1", "-o", out)
    assert result.returncode == 0 and "Traceback (most recent call last)" not in result.stderr, result.stderr
    [profile] = read_speedscope(out)
    named, total = share(profile.stacks, lambda s: ends_with(s, ("main", "a", "b", "c", "spin"))
                         or ends_with(s, ("recurse", "spin")))  # fmt: skip
    assert total > 0 and named / total >= 0.95, profile.stacks
    session = Session.load(str(tmp_path / "chain.nprof"))
    assert any(m.path.endswith("/caf\ufffd/chain") for m in session.modules), [m.path for m in session.modules]
    rendered = run_nprof("report", str(tmp_path / "chain.nprof"), "-o", str(tmp_path / "chain.folded"))
    assert rendered.returncode == 0, rendered.stderr


def test_no_native_shows_what_ran_no_python_as_such(chain_fp, tmp_path):
    """``--no-native`` keeps the managed frames only: a thread running no Python had an empty stack, and its
    samples were left out of every output while the summary counted them (an OpenMP worker of PyTorch:
    426 samples said, 209 shown). They show as one labelled frame now, here for a whole C program."""
    out = str(tmp_path / "c.folded")
    with running_target([chain_fp, str(DEPTH)]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "--no-native", "-o", out)
        assert result.returncode == 0, result.stderr
    counts = Counter()
    with open(out) as f:
        for line in f:
            stack, _, n = line.rpartition(" ")
            counts[stack] += int(n)
    total = Session.load(str(tmp_path / "c.nprof")).total_samples
    assert dict(counts) == {"[native code, no Python frame: --native shows it]": total}, counts


def test_a_stripped_program_s_functions_are_one_frame_each(chain_fp, tmp_path):
    """With no symbols left, a function is named by its start, as its FDE delimits it: one frame per
    function, as a symbol would give (each address sampled was a frame and a top-table line of its own).
    Ground truth: the symbols of the same program before it was stripped."""
    stripped = str(tmp_path / "chain-stripped")
    subprocess.run(["strip", "-o", stripped, chain_fp], check=True)
    with open(chain_fp, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        starts = {s["st_value"]: s.name for s in symtab.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"}
    out = str(tmp_path / "stripped.speedscope.json")
    with running_target([stripped, str(DEPTH)]) as target:
        record(target.pid, out)
    [profile] = read_speedscope(out)
    prefix = "chain-stripped+0x"
    unnamed = {name for stack in profile.stacks for name in stack if name.startswith(prefix)}
    assert unnamed and all(int(name[len(prefix):], 16) in starts for name in unnamed), sorted(unnamed)
    named = Counter()
    for stack, weight in profile.stacks.items():
        named[tuple(starts[int(n[len(prefix):], 16)] if n.startswith(prefix) else n for n in stack)] += weight
    hit, total = share(named, lambda s: ends_with(s, ("main", "a", "b", "c", "spin"))
                       or ends_with(s, ("main", *(["recurse"] * DEPTH), "spin")))  # fmt: skip
    assert hit / total >= 0.95, f"only {hit / total:.1%} of the samples show a whole chain"


def test_samples_in_an_epilogue_unwind_through_the_red_zone(epilogue_fp, tmp_path):
    """After `pop %rbp` the CFI names the caller's rbp 8 bytes below rsp: the copy includes the red zone,
    so those samples unwind to main too (8-12% of this target's samples were cut there before)."""
    out = str(tmp_path / "epilogue.speedscope.json")
    with running_target([epilogue_fp]) as target:
        record(target.pid, out, "-r", "1000")
    [profile] = read_speedscope(out)
    whole, total = share(profile.stacks, lambda s: "main" in s and "caller" in s)
    assert whole / total >= 0.99, f"{whole}/{total} samples reach main"
    reasons = Session.load(str(tmp_path / "epilogue.nprof")).stop_reason_counts()
    assert reasons.get(StopReason.BAD_FRAME.label, 0) <= 0.01 * sum(reasons.values()), reasons


def test_a_process_whose_main_thread_exited(main_exits_fp, tmp_path):
    """main calls pthread_exit and a thread works on: the zombie main thread has no maps and no memory of
    its own, so maps are read through a live thread and stacks through each stopped thread; it is never
    stopped (it cannot answer), and detaching does not wait for it. Attaching to such a process by pid
    cannot work (ptrace refuses an exited thread): the error says so."""
    out = str(tmp_path / "main-exits.speedscope.json")
    result = run_nprof("record", "-o", out, "--", main_exits_fp, "1.5")
    assert result.returncode == 0, result.stderr
    [worker] = [p for p in read_speedscope(out) if any("worker" in s for s in p.stacks)]
    hit, total = share(worker.stacks, lambda s: ends_with(s, ("start_thread", "worker", "spin")))
    assert hit / total >= 0.9, f"{hit}/{total} samples in worker -> spin"
    counters = Session.load(str(tmp_path / "main-exits.nprof")).counters
    for bad in ("stack_read_errors", "stack_outside_mappings", "threads_not_detached"):
        assert not counters.get(bad), counters
    # the zombie, if it were interrupted, would be late at every tick (it never stops); the worker is late
    # only when it waits for a CPU (47 of ~150 ticks beside two CPU hogs)
    assert counters.get("late_stops", 0) < 0.9 * counters["ticks"], counters
    target = subprocess.Popen([main_exits_fp, "30"])
    try:  # the readiness this waits for is the zombie main thread itself
        assert wait_until(lambda: getattr(procfs.read_status(target.pid), "state", None) == "Z", 10)
        refused = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", str(tmp_path / "x.folded"))
        assert refused.returncode == 3 and "its main thread has exited" in refused.stderr, refused.stderr
    finally:
        stop(target)


def test_each_thread_has_its_own_chain(threads_fp, tmp_path):
    out = str(tmp_path / "threads.speedscope.json")
    with running_target([threads_fp]) as target:
        record(target.pid, out)
        assert_running_free(target.pid)
    profiles = {p.name.split(" (tid")[0]: p for p in read_speedscope(out)}
    chains = {
        "alpha": ("alpha_worker", "alpha_outer", "alpha_inner", "spin"),
        "beta": ("beta_worker", "beta_outer", "beta_inner", "spin"),
        "gamma": ("gamma_worker", "gamma_inner", "spin"),
    }
    for name, chain in chains.items():
        assert name in profiles, f"no profile for thread {name}: {list(profiles)}"
        stacks = profiles[name].stacks
        leaf = {s: w for s, w in stacks.items() if s[-1] == "spin"}
        hit, total = share(leaf, lambda s, chain=chain: ends_with(s, chain))
        assert total > 0 and hit / total >= 0.95, f"thread {name}: {hit}/{total} leaf samples in its chain"
        others = [c for n, c in chains.items() if n != name]
        assert not any(ends_with(s, c) for s in stacks for c in others), f"thread {name} holds another's chain"


def test_session_file_rerenders(chain_fp, tmp_path):
    out = str(tmp_path / "chain.speedscope.json")
    with running_target([chain_fp]) as target:
        record(target.pid, out)
    session = tmp_path / "chain.nprof"
    assert session.exists(), "every record keeps the .nprof session"
    folded = tmp_path / "again.folded"
    result = run_nprof("report", str(session), "-o", str(folded))
    assert result.returncode == 0, result.stderr
    lines = folded.read_text().splitlines()
    assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    assert any(";main" in line and "spin" in line for line in lines)
    again = tmp_path / "again.speedscope.json"
    assert run_nprof("report", str(session), "-o", str(again)).returncode == 0
    original, rendered = json.loads(open(out).read()), json.loads(again.read_text())
    assert original["shared"] == rendered["shared"] and original["profiles"] == rendered["profiles"]


def test_spawned_command_is_profiled_until_it_exits(tmp_path):
    out = str(tmp_path / "demo.speedscope.json")
    result = run_nprof("demo", "-d", "1.5", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "target exited (status 0)" in result.stderr
    [profile] = read_speedscope(out)
    chain = ("main", "run_simulation", "step", "integrate", "compute_forces")
    hit, total = share(profile.stacks, lambda s: ends_with(s, chain))
    assert hit / total > 0.5
    assert any(ends_with(s, ("run_simulation", "render", "shade_pixels")) for s in profile.stacks)


@pytest.mark.parametrize("window", [("4096", "4096"), ("4096", None), ("262144", None)])
def test_stack_window_size(chain_fp, tmp_path, window):
    """A fixed 4 KiB window cannot hold the 12 KiB recursion: those stacks stop early, and the end of the
    recording says how to copy more. A 4 KiB first window grows (to 16 KiB) after the thread's first walks
    it cut, and the rest are whole; 256 KiB holds it all from the start. Nothing is said of either."""
    first, cap = window
    out = str(tmp_path / "w.speedscope.json")
    limits = ["--stack-bytes", first] + (["--max-stack-bytes", cap] if cap else [])
    with running_target([chain_fp, str(DEPTH)]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "2", "-o", out, *limits)
        assert result.returncode == 0, result.stderr
    [profile] = read_speedscope(out)
    full, total = share(profile.stacks, lambda s: ends_with(s, ("main", *(["recurse"] * DEPTH), "spin")))
    deep = sum(w for s, w in profile.stacks.items() if s[-1] == "spin" and s.count("recurse") > 3)
    if cap == "4096":
        assert full == 0
        assert deep > 0
        assert "deeper than the 4,096 bytes copied per sample at most" in result.stderr
        assert "--max-stack-bytes 16384 copies more" in result.stderr
    else:
        assert deep > 0 and full >= 0.97 * deep, (full, deep, total)
        assert "copied per sample" not in result.stderr
    counters = Session.load(str(tmp_path / "w.nprof")).counters
    assert counters.get("stack_windows_widened", 0) == (2 if window == ("4096", None) else 0), counters


def test_depth_limit(chain_fp, tmp_path):
    """Native walks cut at --max-frames lose their outermost frames; the end of the recording says so and
    how to go deeper (the limit used to cut deep recursions silently)."""
    out = str(tmp_path / "d.speedscope.json")
    with running_target([chain_fp, str(DEPTH)]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-d", "2", "-o", out, "--max-frames", "8")
        assert result.returncode == 0, result.stderr
    [profile] = read_speedscope(out)
    assert max(len(s) for s in profile.stacks) <= 8
    assert "native stacks deeper than 8 frames" in result.stderr and "--max-frames 32 goes deeper" in result.stderr


def test_busy_thread_is_stopped_at_rates_above_the_scheduler_tick(chain_fp, tmp_path):
    """At 1 kHz a busy thread's schedstat run time often has not moved since its last sample (the kernel
    accounts a thread that stays on its CPU only at a scheduler tick, every 4 ms at HZ=250): it must still
    be stopped every tick, not counted again with its previous stack (5-7% of its samples were, before
    the timeslice count was checked too)."""
    out = str(tmp_path / "busy.nprof")
    with running_target([chain_fp]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-r", "1000", "-d", "2", "-o", out)
        assert result.returncode == 0, result.stderr
    session = Session.load(out)
    counts = session.stop_reason_counts()
    total = sum(counts.values())
    reused = counts.get(StopReason.REUSED.label, 0)
    assert total > 500, counts
    assert reused / total <= 0.02, f"{reused} of {total} samples of a busy thread reused its last stack"
    # what it cost the target is said, and kept (~20-40 us a stop here; the bound only catches garbage)
    held, p90 = session.counters["stop_held_median_ns"], session.counters["stop_held_p90_ns"]
    assert 0 < held <= p90 < 1_000_000_000, session.counters
    stops, total_ns = session.counters["stops"], session.counters["stop_held_total_ns"]
    assert total - reused <= stops and 0 < total_ns / stops < 1_000_000_000, session.counters
    assert "threads were held" in result.stderr


def test_libraries_loaded_while_recording_are_named_at_once(loader_and_libs, tmp_path):
    """A program that loads libraries as it runs (Python importing numpy loads a dozen): the samples in a
    new library are named from its first one. The target loads 12 libraries, 30 ms in each, after nprof
    has read its maps; nprof used to read the maps again at most every 200 ms and showed most of these
    samples as bare addresses."""
    loader, libs = loader_and_libs
    out = str(tmp_path / "loader.speedscope.json")
    with running_target([loader, "30", *libs]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-r", "1000", "-o", out)
        assert result.returncode == 0, result.stderr
        assert target.wait(timeout=30) == 0
    [profile] = read_speedscope(out)
    bare, total = share(profile.stacks, lambda s: any(name.startswith("0x") for name in s))
    hot, _ = share(profile.stacks, lambda s: ends_with(s, ("main", "run_library", "hot", "work")))
    assert hot / total >= 0.5, f"{hot}/{total} samples in the loaded libraries' hot()"
    assert bare / total <= 0.01, f"{bare}/{total} samples hold a bare address"


def test_a_library_loaded_where_another_was_is_named_from_its_own_file(swapped_libs, tmp_path):
    """dlclose of one library, then dlopen of another mapped at the same addresses: no pc falls outside
    the maps nprof read, so nothing made it read them again, and every sample of the second was named
    from the first. The lines of the maps that map code are compared every 0.1 s
    (``address_space.RECHECK_INTERVAL``). Reading the maps every second, a third of the second library's
    samples (each runs 1.5 s) were named work_a, and 68 of 226 samples of another program whose second
    library's layout differs were lone frames named from the first."""
    loader, libs = swapped_libs
    out = str(tmp_path / "swapped.speedscope.json")
    report = str(tmp_path / "addresses")
    with running_target([loader, "1500", *libs], env={**os.environ, "LOADER_DLCLOSE": report}) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-r", "500", "-o", out)
        assert result.returncode == 0, result.stderr
        assert target.wait(timeout=30) == 0
    with open(report) as f:
        first, second = f.read().split()
    assert first == second, "the second library was not mapped where the first was: nothing to test"
    [profile] = read_speedscope(out)
    a, total = share(profile.stacks, lambda s: ends_with(s, ("main", "run_library", "hot", "work_a")))
    b, _ = share(profile.stacks, lambda s: ends_with(s, ("main", "run_library", "hot", "work_b")))
    assert a / total >= 0.4 and b / total >= 0.4, f"work_a {a}/{total}, work_b {b}/{total}"


def record_the_library(loader: str, lib: str, out: str) -> tuple[subprocess.CompletedProcess, ThreadProfile]:
    """Record tests/targets/loader.c spinning 1 s in ``lib``'s work(), to its end: nprof's result, the profile."""
    with running_target([loader, "1000", lib]) as target:
        result = run_nprof("record", "--pid", str(target.pid), "-r", "200", "-o", out)
        assert result.returncode == 0, result.stderr
        assert target.wait(timeout=30) == 0
    [profile] = read_speedscope(out)
    return result, profile


def test_a_profile_mostly_in_a_stripped_library_says_so(loader_and_libs, build_dir, tmp_path):
    """Frames in functions no symbol covers show as ``module+0xOFFSET``: a profile led by
    ``libz.so.1.2.13+0x5d80`` (zlib's deflate, Debian strips it) said nothing of why, or of what names it.
    The end of the recording says which module, how much of the profile, and that it is stripped."""
    loader, _ = loader_and_libs
    lib = build_c("loaded_lib.c", build_dir, (*NO_FRAME_POINTERS, "-shared", "-fPIC", "-DWORK_LINKAGE=static"),
                  name="stripped_lib.so")  # fmt: skip
    subprocess.run(["strip", "--strip-all", lib], check=True)
    assert ".symtab" not in ElfFile(lib).sections
    result, profile = record_the_library(loader, lib, str(tmp_path / "stripped.speedscope.json"))
    unnamed, total = share(profile.stacks, lambda s: s[-1].startswith("stripped_lib.so+0x"))
    assert unnamed / total >= 0.5, profile.stacks
    notice = re.search(r"nprof: ([\d.]+)% of the samples went through functions without a symbol, shown as "
                       r"MODULE\+0xOFFSET, in 1 module \(stripped_lib.so [\d.]+%\); (\S+): stripped, and no debug "
                       r"file was found by build-id under /usr/lib/debug/.build-id: .*debuginfod-find debuginfo FILE"
                       r".*a build that keeps its symbol table", result.stderr)  # fmt: skip
    assert notice is not None, result.stderr
    assert float(notice.group(1)) >= 50 and notice.group(2) == lib


def add_minidebuginfo(path: str, scratch: str) -> None:
    """Strip ``path`` as Fedora's packages are, keeping in ``.gnu_debugdata`` the xz-compressed symbols of the
    functions its ``.dynsym`` lacks (the GDB manual's recipe, "MiniDebugInfo")."""

    def names(*flags: str) -> set[str]:
        out = subprocess.run(["nm", *flags, "--format=posix", "--defined-only", path], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        return {line.split()[0] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1] in "Tt"}

    keep, mini = os.path.join(scratch, "keep_symbols"), os.path.join(scratch, "mini_debuginfo")
    with open(keep, "w") as f:
        f.write("\n".join(sorted(names() - names("-D"))) + "\n")
    subprocess.run(["objcopy", "--only-keep-debug", path, mini], check=True)
    subprocess.run(["objcopy", "-S", "--remove-section", ".comment", f"--keep-symbols={keep}", mini], check=True)
    subprocess.run(["strip", "--strip-all", "-R", ".comment", path], check=True)
    with open(mini, "rb") as f:
        packed = lzma.compress(f.read(), format=lzma.FORMAT_XZ)
    with open(mini + ".xz", "wb") as f:
        f.write(packed)
    subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={mini}.xz", path], check=True)


def test_a_stripped_library_is_named_from_its_minidebuginfo(loader_and_libs, build_dir, tmp_path):
    """Fedora and RHEL strip every packaged file and keep its static functions' names in ``.gnu_debugdata``
    (so does the libgomp.so.1 of PyTorch's wheels, whose OpenMP workers showed as ``libgomp.so.1+0x1dfd0``
    in 46-90% of a training loop's samples): nprof names them from it, as gdb does."""
    loader, _ = loader_and_libs
    lib = build_c("loaded_lib.c", build_dir, (*NO_FRAME_POINTERS, "-shared", "-fPIC", "-DWORK_LINKAGE=static"),
                  name="minidebug_lib.so")  # fmt: skip
    add_minidebuginfo(lib, str(tmp_path))
    assert ".symtab" not in ElfFile(lib).sections and ".gnu_debugdata" in ElfFile(lib).sections
    result, profile = record_the_library(loader, lib, str(tmp_path / "mini.speedscope.json"))
    named, total = share(profile.stacks, lambda s: s[-1] == "work")
    assert named / total >= 0.5, profile.stacks
    assert "that have no symbol" not in result.stderr


def test_a_corrupt_minidebuginfo_is_left_out(build_dir, tmp_path):
    """A ``.gnu_debugdata`` that is not xz, or not ELF inside, names nothing and breaks nothing."""
    lib = build_c("loaded_lib.c", build_dir, (*NO_FRAME_POINTERS, "-shared", "-fPIC", "-DWORK_LINKAGE=static"),
                  name="minidebug_corrupt.so")  # fmt: skip
    subprocess.run(["strip", "--strip-all", lib], check=True)
    for name, content in (("not_xz", b"garbage" * 100), ("not_elf", lzma.compress(b"garbage" * 100))):
        path = tmp_path / name
        path.write_bytes(content)
        copy = str(tmp_path / f"{name}.so")
        subprocess.run(["objcopy", "--add-section", f".gnu_debugdata={path}", lib, copy], check=True)
        elf = ElfFile(copy)
        assert mini_debuginfo(elf) is None
        assert ObjectFile(elf).symbols.source == ".dynsym"


#: a Python program that spends its time in zlib's deflate, in the system's libz (Debian strips it)
DEFLATE = (
    "import time, zlib\n"
    "data = bytes(range(256)) * 4000\n"
    "end = time.time() + 1.5\n"
    "while time.time() < end:\n"
    "    zlib.compress(data, 9)\n"
)


def _system_libz() -> str | None:
    """The libz this Python's zlib module runs, when a dpkg package shipped it stripped: else None."""
    if shutil.which("dpkg-query") is None or not getattr(zlib, "__file__", None):
        return None
    ldd = subprocess.run(["ldd", zlib.__file__], capture_output=True, text=True).stdout
    found = re.search(r"libz\.so\.1 => (\S+)", ldd)
    if found is None or ".symtab" in ElfFile(found.group(1)).sections:
        return None
    return found.group(1) if _package_of(found.group(1)) else None


@pytest.mark.skipif(_system_libz() is None, reason="no stripped libz of a dpkg package under this Python's zlib")
def test_the_debug_package_is_named_after_the_target_exited(tmp_path):
    """The package that names a stripped system library's functions was found only while the target ran:
    its /proc/PID/root, by which nprof tells the system's files from a container's, is gone once it has
    exited, and a command recorded to its end got the advice for a file of no package (2 of 2 runs)."""
    result = run_nprof("record", "-o", str(tmp_path / "z.folded"), "--", sys.executable, "-c", DEFLATE)
    assert result.returncode == 0, result.stderr
    notice = re.search(r"nprof: [\d.]+% of the samples went through functions without a symbol.* \(libz\.so.*",
                       result.stderr)  # fmt: skip
    assert notice is not None, result.stderr
    assert "zlib1g" in notice.group(0) and "a build that keeps" not in notice.group(0), notice.group(0)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chroot") is None, reason="chroot(2) needs root")
def test_a_chrooted_target_is_named_from_its_files(tmp_path):
    """/proc/PID/maps gives paths as the reader resolves them: a chroot'ed process's files at their host
    path, the chroot's directory included, which /proc/PID/root (the target's root, for a container's
    files) does not have under it. Every frame of a chroot'ed program was unnamed (chain+0x1234); the path
    whose inode is the mapping's is read now."""
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    binary = build_c("chain.c", str(root / "bin"), (*FRAME_POINTERS, "-static"), name="chain")
    out = str(tmp_path / "chroot.speedscope.json")
    with running_target(["chroot", str(root), "/bin/chain"], ready_at=3) as target:
        assert os.readlink(f"/proc/{target.pid}/exe") == binary
        result = run_nprof("record", "--pid", str(target.pid), "-d", "1", "-o", out)
        assert result.returncode == 0, result.stderr
    [profile] = read_speedscope(out)
    named, total = share(profile.stacks, lambda s: ends_with(s, ("main", "a", "b", "c", "spin")) or "recurse" in s)
    assert total > 0 and named / total >= 0.9, f"{named}/{total} samples named from the chroot's binary"


def test_a_thread_id_given_as_pid_records_its_process(threads_fp, tmp_path):
    """``top -H`` and ``ps -L`` list thread ids: given one, the whole process was recorded but labelled
    with the thread's id, and the recording ended when that thread exited. Its process is recorded."""
    out = str(tmp_path / "tid.speedscope.json")
    with running_target([threads_fp]) as target:
        assert wait_until(lambda: len(os.listdir(f"/proc/{target.pid}/task")) > 1)
        tid = max(int(t) for t in os.listdir(f"/proc/{target.pid}/task"))
        result = run_nprof("record", "--pid", str(tid), "-d", "1", "-o", out)
        assert result.returncode == 0, result.stderr
    assert f"{tid} is a thread of process {target.pid}" in result.stderr
    assert Session.load(str(tmp_path / "tid.nprof")).meta.pid == target.pid
    assert len(read_speedscope(out)) > 1, "every thread of the process is recorded"


def test_a_recording_says_which_threads_never_stopped_and_lets_them_go(tmp_path):
    """A thread in uninterruptible sleep stops for nothing: with ``--idle`` it was missing from the profile
    without a word (a sweep), and, with every thread stopped to be detached, it stayed traced until nprof
    exited. The tracing thread's exit lets it go at the end of the recording, and the recording says it
    had no samples."""
    binary = build_c("stuck.c", str(tmp_path), FRAME_POINTERS, name="stuck")
    out = str(tmp_path / "stuck.folded")
    with running_target([binary]) as target:
        assert wait_until(lambda: procfs.read_status(target.pid).state == "D")
        with open(f"/proc/{target.pid}/task/{target.pid}/children") as f:
            [child] = [int(pid) for pid in f.read().split()]
        try:
            result = run_nprof("record", "--pid", str(target.pid), "--idle", "-d", "1", "-o", out)
            assert_running_free(target.pid)
        finally:
            os.kill(child, signal.SIGKILL)
    assert result.returncode == 0, result.stderr
    assert "1 thread(s) did not stop when last asked (1 in uninterruptible sleep (D))" in result.stderr, result.stderr


def test_dump_lists_a_thread_that_cannot_stop_and_says_why(tmp_path):
    """A thread in uninterruptible sleep ("D": a hung program waiting in the kernel) does not stop for
    ptrace until it wakes. ``nprof dump`` left it out without a word, though a hung thread is what one runs
    ``dump`` to see; it lists it now, with its state and the kernel function it waits in."""
    binary = build_c("stuck.c", str(tmp_path), FRAME_POINTERS, name="stuck")
    with running_target([binary]) as target:
        assert wait_until(lambda: procfs.read_status(target.pid).state == "D")
        with open(f"/proc/{target.pid}/task/{target.pid}/children") as f:
            [child] = [int(pid) for pid in f.read().split()]
        try:
            result = run_nprof("dump", "--pid", str(target.pid), "--json")
            assert result.returncode == 0, result.stderr
            assert_running_free(target.pid)
        finally:
            os.kill(child, signal.SIGKILL)  # (its parent, killed next, leaves it to init)
    threads = {t["tid"]: t for t in dumped_threads(json.loads(result.stdout))}
    main = threads[target.pid]
    assert main["frames"] == [] and main["unstopped"].startswith("did not stop in time: disk sleep")
    assert any(t["frames"] for tid, t in threads.items() if tid != target.pid), "the spinning thread's stack"


def test_dump_lists_a_thread_that_woke_too_late_to_be_dumped(tmp_path):
    """The stuck thread wakes after the dump gave up on it, while nprof detaches: its stop then comes, the
    detach takes it, and the thread was left out of the dump without a word (its record was gone by the
    time the dump listed threads that did not stop). Made certain by ending the vfork child the moment
    the other thread runs again, which is when the hold is over."""
    binary = build_c("stuck.c", str(tmp_path), FRAME_POINTERS, name="stuck")
    with running_target([binary]) as target:
        assert wait_until(lambda: procfs.read_status(target.pid).state == "D")
        with open(f"/proc/{target.pid}/task/{target.pid}/children") as f:
            [child] = [int(pid) for pid in f.read().split()]
        [spinner] = [int(t) for t in os.listdir(f"/proc/{target.pid}/task") if int(t) != target.pid]
        nprof = subprocess.Popen(nprof_command("dump", "--pid", str(target.pid), "--json"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

        def held() -> bool:
            """The spinner stopped, and still 20 ms later: the hold, which waits out the stuck thread's
            stop deadline, not the brief stop dump makes before it (microseconds)."""
            if thread_states(target.pid).get(spinner, ("?", 0))[0] != "t":
                return False
            time.sleep(0.02)
            return thread_states(target.pid).get(spinner, ("?", 0))[0] == "t"

        try:
            assert wait_until(held, timeout=60)
            assert wait_until(lambda: thread_states(target.pid).get(spinner, ("t", 0))[0] != "t", timeout=60)
            os.kill(child, signal.SIGKILL)  # the parent leaves vfork, and its pending stop comes
            stdout, stderr = nprof.communicate(timeout=60)
        finally:
            if nprof.poll() is None:
                nprof.kill()
                nprof.communicate()
        assert nprof.returncode == 0, stderr
        assert_running_free(target.pid)
    threads = {t["tid"]: t for t in dumped_threads(json.loads(stdout))}
    assert target.pid in threads, "the thread that did not stop is listed"
    assert threads[target.pid]["unstopped"].startswith("did not stop in time: disk sleep")


def test_dump_shows_a_thread_stopped_for_a_signal_as_running(signals_fp):
    """A busy thread taking a SIGALRM every millisecond was often, at the dump's look at its state, in a
    signal-delivery stop: nprof's own tracing stop, shown as the thread's state ("[tracing stop]" in 10 of
    10 dumps of such a program)."""
    with running_target([signals_fp]) as target:
        states = []
        for _ in range(4):
            result = run_nprof("dump", "--pid", str(target.pid), "--json")
            assert result.returncode == 0, result.stderr
            states += [t["state"] for t in dumped_threads(json.loads(result.stdout))]
        assert_running_free(target.pid)
    assert set(states) == {"running"}, states


def test_dump_says_where_and_why_a_stack_was_cut(chain_fp):
    """A dump cut short by its stack window says so, with the option that copies more; its default window
    (1 MiB, 16 times record's: a dump stops each thread once) holds the chain's recursion whole. A 64 KiB
    window cut a 2000-deep recursion at 293 frames, silently."""
    with running_target([chain_fp]) as target:
        cut = run_nprof("dump", "--pid", str(target.pid), "--json", "--stack-bytes", "64")
        whole = run_nprof("dump", "--pid", str(target.pid), "--json")
        text = run_nprof("dump", "--pid", str(target.pid), "--stack-bytes", "64")
    assert cut.returncode == whole.returncode == text.returncode == 0, cut.stderr + whole.stderr
    [small] = [t for t in dumped_threads(json.loads(cut.stdout)) if t["tid"] == target.pid]
    assert small["walk_stopped"] == "window exhausted; --stack-bytes 128 copies more", small
    assert "... (the native walk stopped here: window exhausted; --stack-bytes 128 copies more)" in text.stdout
    [full] = [t for t in dumped_threads(json.loads(whole.stdout)) if t["tid"] == target.pid]
    assert "walk_stopped" not in full and full["frames"][-1]["name"] == "_start", full["frames"][-3:]
