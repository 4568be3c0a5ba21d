"""Numpy symbol tables on a real binary, symbolization, and the exporters' output."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from profiler.binary.elf import ElfFile
from profiler.binary.symbols import load_symbols
from profiler.cli.status import error_summary
from profiler.config import ExportConfig
from profiler.errors import BinaryError, UsageError
from profiler.export import folded
from profiler.export.base import infer_format, write
from profiler.export.folded import FoldedExporter
from profiler.export.speedscope import SpeedscopeExporter
from profiler.model import FrameInfo, FrameKind, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.symbolize.demangle import demangle
from tests.support.targets import build_c


def nm_functions(path: str) -> dict[str, int]:
    out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    rows = (line.split() for line in out.splitlines())
    return {parts[2]: int(parts[0], 16) for parts in rows if len(parts) == 3 and parts[1] in "tT"}


def test_symbol_table_agrees_with_nm(chain_fp):
    symbols = load_symbols(ElfFile(chain_fp))
    assert symbols.source == ".symtab"
    for name in ("main", "a", "b", "c", "spin", "recurse"):
        start = nm_functions(chain_fp)[name]
        hit = symbols.lookup(start + 1)
        assert hit is not None and hit[0] == name and hit[1] == start
    assert symbols.address_of("sink") is not None  # data objects too
    hits = symbols.lookup_many(np.array([0, 2**63], dtype=np.uint64))
    assert hits == [None, None]


def test_dynsym_fallback_and_suffix_shared_names():
    symbols = load_symbols(ElfFile("/lib/x86_64-linux-gnu/libc.so.6"))
    assert symbols.source == ".dynsym"  # Debian's libc keeps .symtab in its debug file only
    malloc = symbols.address_of("malloc")  # "malloc" shares its string with "__libc_malloc"
    assert malloc is not None and symbols.lookup(malloc[0])[0] == "malloc"


ASM_LABELS = r"""
/* asm_entry: a label without .type (STT_NOTYPE), as ld.so's _start; inner_label: one inside a function */
__asm__(".text\n.globl asm_entry\nasm_entry:\n  call real_function\n  nop\n  ret\n");
int real_function(void) {
    __asm__ volatile("nop\ninner_label:\nnop");
    return 1;
}
int main(void) { return real_function(); }
"""


def test_assembly_labels_name_only_what_no_function_covers(tmp_path):
    source = tmp_path / "labels.c"
    source.write_text(ASM_LABELS)
    binary = build_c(str(source), str(tmp_path), ["-O1"], name="labels")
    symbols = load_symbols(ElfFile(str(binary)))
    entry = symbols.address_of("asm_entry")[0]
    inner = symbols.address_of("inner_label")[0]
    function = symbols.address_of("real_function")[0]
    # the return address after `call real_function`: in no function, so named by the label
    assert symbols.lookup(entry + 5) is None
    assert symbols.label_many([entry + 5, inner]) == ["asm_entry", "inner_label"]
    assert symbols.lookup(inner)[1] == function  # the symbolizer asks labels only where this is None
    assert symbols.label_many([function]) == [None]  # a label ends where the next function starts


def test_corrupt_elf_is_a_binary_error(tmp_path):
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF" + b"\xff" * 60)
    with pytest.raises(BinaryError):
        ElfFile(str(bad))
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(BinaryError):
        ElfFile(str(empty))
    truncated = tmp_path / "truncated.so"  # its section header table (at the end of the file) is cut off
    with open("/lib/x86_64-linux-gnu/libc.so.6", "rb") as f:
        truncated.write_bytes(f.read(1 << 16))
    with pytest.raises(BinaryError, match="past the end"):
        ElfFile(str(truncated))


@pytest.mark.parametrize("path", ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "chain_fp"])
def test_headers_agree_with_pyelftools(path, request):
    """ElfFile parses the header tables itself, struct by struct (elf.py): the same sections, load segments
    and build-id as pyelftools' own objects give."""
    if path == "chain_fp":
        path = request.getfixturevalue("chain_fp")
    elf = ElfFile(path)
    with open(path, "rb") as f:
        reference = ELFFile(f)
        sections = [(s.name, s["sh_type"], s["sh_addr"], s["sh_offset"], s["sh_size"])
                    for s in reference.iter_sections()]  # fmt: skip
        loads = [(p["p_offset"], p["p_vaddr"], p["p_filesz"], p["p_memsz"], p["p_flags"])
                 for p in reference.iter_segments() if p["p_type"] == "PT_LOAD"]  # fmt: skip
        build_ids = [n["n_desc"] for p in reference.iter_segments() if p["p_type"] == "PT_NOTE"
                     for n in p.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID"]  # fmt: skip
    assert [elf.section_name(i) for i in range(len(sections))] == [s[0] for s in sections]
    for name, sh_type, addr, offset, size in sections:
        if name:
            info = elf.sections[name]
            assert (info.sh_type, info.sh_addr, info.sh_offset, info.sh_size) == (sh_type, addr, offset, size)
    assert [(s.p_offset, s.p_vaddr, s.p_filesz, s.p_memsz, s.p_flags) for s in elf.load_segments] == loads
    assert build_ids and elf.build_id == build_ids[0]


def test_demangle():
    assert demangle("_ZN3foo3barEv") == "foo::bar()"
    assert demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE") == "core::ptr::drop_in_place"
    vector = "std::vector<int, std::allocator<int> >::push_back(int const&).cold"
    assert demangle("_ZNSt6vectorIiSaIiEE9push_backERKi.cold") == vector
    assert demangle("plain_c") == "plain_c" and demangle("_Znot-valid") == "_Znot-valid"


def session_with_two_threads() -> Session:
    session = Session(SessionMeta(pid=7, command=["prog"], duration=1.0))
    session.counters["ticks"] = 100
    a = session.thread_index(7, 7, 1, "main")
    b = session.thread_index(7, 8, 2, "worker")
    k = lambda addr: (FrameKind.NATIVE, 0, addr, 0)  # noqa: E731
    s_main = session.intern_stack((k(3), k(2), k(1)))  # innermost first: leaf 3, root 1
    s_other = session.intern_stack((k(4), k(2), k(1)))
    session.add_sample(a, s_main, StopReason.END_OF_STACK, SampleClass.RUNNING, 60)
    session.add_sample(b, s_other, StopReason.END_OF_STACK, SampleClass.RUNNING, 30)
    session.add_sample(b, s_other, StopReason.REUSED, SampleClass.IDLE, 10)
    # frames 0..3 are addresses 1, 2, 3, 4 in interning order (root first)
    names = {1: "root", 2: "mid", 3: "leaf", 4: "leaf"}  # two addresses in one function
    session.frame_info = [FrameInfo(names[session.frames.key(f)[2]], module="prog") for f in range(len(session.frames))]
    return session


def test_speedscope_profiles_and_shared_frames():
    doc = json.loads(SpeedscopeExporter().render(session_with_two_threads(), ExportConfig()))
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert sorted(names) == ["leaf", "mid", "root"], "one shared frame per function, however many addresses"
    profiles = {p["name"]: p for p in doc["profiles"]}
    assert list(profiles) == ["all threads (2)", "main (tid 7)", "worker (tid 8)"]  # then busiest first
    main = profiles["main (tid 7)"]
    assert [[names[i] for i in s] for s in main["samples"]] == [["root", "mid", "leaf"]]
    assert main["weights"] == [pytest.approx(0.6)] and main["unit"] == "seconds"
    assert profiles["worker (tid 8)"]["weights"] == [pytest.approx(0.3)], "idle samples are left out"
    with_idle = json.loads(SpeedscopeExporter().render(session_with_two_threads(), ExportConfig(idle=True)))
    assert [p["weights"] for p in with_idle["profiles"] if p["name"].startswith("worker")] == [[pytest.approx(0.4)]]


def test_speedscope_opens_on_all_threads_together():
    """A threaded server's 603 profiles opened on its main thread, with 2.9% of the samples (issue 44): the
    first profile, the one speedscope opens, is every thread's samples together, each stack once with the
    sum of the threads' weights; the threads' own follow."""
    doc = json.loads(SpeedscopeExporter().render(session_with_two_threads(), ExportConfig()))
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert doc["activeProfileIndex"] == 0
    together, *threads = doc["profiles"]
    assert together["name"] == "all threads (2)" and [p["name"] for p in threads] == ["main (tid 7)", "worker (tid 8)"]
    # main's leaf and worker's are two addresses of one function: one stack, 60 + 30 samples
    assert [[names[i] for i in s] for s in together["samples"]] == [["root", "mid", "leaf"]]
    assert together["weights"] == [pytest.approx(0.9)]
    assert together["endValue"] == pytest.approx(sum(p["endValue"] for p in threads))


def test_speedscope_writes_a_stack_once_per_profile():
    """Stacks that differ only in what is not shown (here an address within a function) are one entry."""
    session = session_with_two_threads()
    session.add_sample(0, 3, StopReason.END_OF_STACK, SampleClass.RUNNING, 15)  # main runs worker's leaf address
    doc = json.loads(SpeedscopeExporter().render(session, ExportConfig()))
    together, main, _worker = doc["profiles"]
    assert main["name"] == "main (tid 7)" and len(main["samples"]) == 1 and main["weights"] == [pytest.approx(0.75)]
    assert len(together["samples"]) == 1 and together["weights"] == [pytest.approx(1.05)]


def test_speedscope_of_one_thread_has_no_profile_of_all():
    """One thread's profile is all threads': written once."""
    session = session_with_two_threads()
    session.samples = {k: n for k, n in session.samples.items() if k[0] == 0}
    [only] = json.loads(SpeedscopeExporter().render(session, ExportConfig()))["profiles"]
    assert only["name"] == "main (tid 7)"


def test_speedscope_keeps_processes_apart_in_the_profile_of_all_threads():
    """With --subprocesses, each process is the root of its stacks in the profile of all threads, as in folded
    output: a child's stacks are not merged into its parent's."""
    session = session_with_two_threads()
    child = session.thread_index(9, 9, 3, "MainThread")
    session.add_sample(child, 0, StopReason.END_OF_STACK, SampleClass.RUNNING, 5)  # stack 0: [root]
    session.meta.processes = {7: ["prog"], 9: ["prog", "--child"]}
    doc = json.loads(SpeedscopeExporter().render(session, ExportConfig()))
    names = [f["name"] for f in doc["shared"]["frames"]]
    together, *threads = doc["profiles"]
    assert together["name"] == "all threads (3) of 2 processes"
    stacks = {tuple(names[i] for i in s): w for s, w in zip(together["samples"], together["weights"])}
    assert stacks == {("pid 7 [prog]", "root", "mid", "leaf"): pytest.approx(0.9),
                      ("pid 9 [prog --child]", "root"): pytest.approx(0.05)}  # fmt: skip
    assert [p["name"] for p in threads] == ["pid 7 [prog]: main (tid 7)", "pid 7 [prog]: worker (tid 8)",
                                            "pid 9 [prog --child]: MainThread (tid 9)"]  # fmt: skip


def test_speedscope_stacks_are_in_flame_graph_order():
    """Counts keep no timeline: stacks are written in alphabetical order of their frames, root first, so
    that speedscope's Time Order view draws a flame graph, where a common prefix is one block."""
    session = Session(SessionMeta(pid=7, command=["prog"], duration=1.0))
    session.counters["ticks"] = 100
    thread = session.thread_index(7, 7, 1, "main")
    k = lambda addr: (FrameKind.NATIVE, 0, addr, 0)  # noqa: E731
    names = {1: "main", 2: "parse", 3: "render", 4: "lex", 5: "draw"}
    # heaviest first, parse and its callees are not neighbours: Time Order showed parse as two blocks
    for stack, n in (((4, 2, 1), 50), ((5, 3, 1), 30), ((2, 1), 10), ((3, 1), 5)):
        sid = session.intern_stack(tuple(k(a) for a in stack))
        session.add_sample(thread, sid, StopReason.END_OF_STACK, SampleClass.RUNNING, n)
    session.frame_info = [FrameInfo(names[session.frames.key(f)[2]], module="prog") for f in range(len(session.frames))]
    doc = json.loads(SpeedscopeExporter().render(session, ExportConfig()))
    shared = [f["name"] for f in doc["shared"]["frames"]]
    [profile] = doc["profiles"]
    stacks = [[shared[i] for i in s] for s in profile["samples"]]
    assert stacks == [["main", "parse"], ["main", "parse", "lex"], ["main", "render"], ["main", "render", "draw"]]
    assert profile["weights"] == [pytest.approx(w) for w in (0.1, 0.5, 0.05, 0.3)]


def test_folded_merges_threads_unless_asked():
    text = FoldedExporter().render(session_with_two_threads(), ExportConfig()).decode()
    assert text == "root [prog];mid [prog];leaf [prog] 90\n"
    per_thread = FoldedExporter().render(session_with_two_threads(), ExportConfig(threads=True)).decode()
    assert "main (tid 7);root [prog];mid [prog];leaf [prog] 60\n" in per_thread


def test_a_folded_file_is_written_in_pieces_that_make_its_lines_in_order(monkeypatch, tmp_path):
    """``write`` takes the folded file piece by piece (``FoldedExporter.pieces``), so that its text is not held
    twice: the pieces are the file ``render`` makes, lines sorted, each piece whole lines."""
    monkeypatch.setattr(folded, "PIECE_BYTES", 40)  # a line or two a piece
    session, config = session_with_two_threads(), ExportConfig(threads=True)
    pieces = [bytes(p) for p in FoldedExporter().pieces(session, config)]
    whole = bytes(FoldedExporter().render(session, config))
    assert len(pieces) > 1 and b"".join(pieces) == whole and all(p.endswith(b"\n") for p in pieces)
    lines = whole.decode().splitlines()
    assert lines == sorted(lines) and len(lines) == 2
    out = tmp_path / "p.folded"
    write(session, str(out), FoldedExporter(), config)
    assert out.read_bytes() == whole


def session_with_eval_loop(leaf_native: bool) -> Session:
    """main -> eval loop (do_call_core inlined at the pc) running py_outer, py_inner -> [C call]."""
    session = Session(SessionMeta(pid=7, command=["python3"], duration=1.0))
    native = lambda addr: (FrameKind.NATIVE, 0, addr, 0)  # noqa: E731
    python = lambda code: (FrameKind.RUNTIME, 0, code, 0)  # noqa: E731
    leaf = (native(4),) if leaf_native else ()
    sid = session.intern_stack(leaf + (python(0x20), python(0x10), native(2), native(1)))
    session.add_sample(session.thread_index(7, 7, 1, "main"), sid, StopReason.END_OF_STACK, SampleClass.RUNNING, 5)
    names = {(FrameKind.NATIVE, 1): "main", (FrameKind.NATIVE, 2): "_PyEval_EvalFrameDefault",
             (FrameKind.NATIVE, 4): "PyObject_Vectorcall", (FrameKind.RUNTIME, 0x10): "py_outer",
             (FrameKind.RUNTIME, 0x20): "py_inner"}  # fmt: skip
    infos = []
    for fid in range(len(session.frames)):
        kind, _module, address, _offset = session.frames.key(fid)
        name = names[(FrameKind(kind), address)]
        infos.append(FrameInfo(name, module="python3", interpreter=name.startswith("_PyEval")))
        if name.startswith("_PyEval"):
            # call glue, flagged by name as the symbolizer does (is_interpreter_function)
            session.inlined[fid] = [FrameInfo("do_call_core", module="python3", inlined=True, interpreter=True)]
        if name == "main":
            session.inlined[fid] = [FrameInfo("run_main", module="python3", inlined=True)]
    session.frame_info = infos
    return session


@pytest.mark.parametrize("leaf_native", [True, False])
def test_calls_inlined_into_the_eval_loop_follow_its_python_frames(leaf_native):
    """do_call_core runs for py_inner, the newest frame its activation executes: it is shown under py_inner,
    not between the eval loop and py_outer. Inlined calls of other frames stay right under their frame."""
    text = FoldedExporter().render(session_with_eval_loop(leaf_native), ExportConfig()).decode()
    names = [frame.split(" ")[0] for frame in text.rsplit(" ", 1)[0].split(";")]
    expected = ["main", "run_main", "_PyEval_EvalFrameDefault", "py_outer", "py_inner", "do_call_core"]
    assert names == expected + (["PyObject_Vectorcall"] if leaf_native else [])
    hidden = FoldedExporter().render(session_with_eval_loop(leaf_native), ExportConfig(hide_interpreter=True))
    names = [frame.split(" ")[0] for frame in hidden.decode().rsplit(" ", 1)[0].split(";")]
    assert names == ["main", "run_main", "py_outer", "py_inner"] + (["PyObject_Vectorcall"] if leaf_native else [])


@pytest.mark.parametrize(
    "path, fmt",
    [("a.speedscope.json", "speedscope"), ("x.json", "speedscope"), ("p.folded", "folded"), ("s.nprof", "nprof")],
)
def test_format_from_extension(path, fmt):
    assert infer_format(path, None).format == fmt


def test_unknown_format():
    with pytest.raises(UsageError, match="Cannot tell"):
        infer_format("out.xyz", None)
    with pytest.raises(UsageError, match="Unknown output format"):
        infer_format("out.json", "svgz")


def test_bias_when_two_segments_share_a_file_page():
    """rustc/lld layout: R at offset 0 (vaddr 0), R E at offset 0x13390 (vaddr 0x14390): file page 0x13000
    holds the end of one and the start of the other; an executable mapping of it maps the R E segment."""
    from profiler.binary.elf import LoadSegment

    elf = ElfFile.__new__(ElfFile)
    elf.load_segments = [LoadSegment(0, 0, 0x13390, 0x13390, 4), LoadSegment(0x13390, 0x14390, 0x3DB90, 0x3DB90, 5)]
    base = 0x5555_5555_4000
    assert elf.bias_for(base + 0x14000, 0x13000, executable=True) == base
    assert elf.bias_for(base, 0, executable=False) == base


def test_folded_lines_survive_names_and_commands_with_newlines():
    """A thread named with ';' and a newline, and a ``python -c`` child whose program spans lines, stay
    one line per stack: flamegraph.pl reads a line as frames, a space, and a count."""
    session = session_with_two_threads()
    session.thread_index(9, 9, 3, "evil;name\nwith newline")
    session.add_sample(2, 0, StopReason.END_OF_STACK, SampleClass.RUNNING, 5)
    session.meta.processes = {7: ["prog"], 9: ["python3", "-c", "x = 0\nfor i in range(3):\n    x += i"]}
    text = FoldedExporter().render(session, ExportConfig(threads=True)).decode()
    lines = text.splitlines()
    assert all(re.fullmatch(r"[^\n]+ \d+", line) for line in lines), lines
    assert "pid 9 [python3 -c x = 0 for i in range(3): x += i];evil:name with newline (tid 9);root [prog] 5" in lines


def test_the_errors_at_the_end_say_what_they_were():
    session = session_with_two_threads()
    assert error_summary(session) == "0 errors"
    session.counters.update(python_stacks_unreadable=2, stack_read_errors=5, python_stacks_too_deep=9)
    assert error_summary(session) == "7 errors: 5 stack copies failed, 2 Python thread states unreadable"


def test_one_error_is_said_in_the_singular():
    session = session_with_two_threads()
    session.counters.update(python_stacks_truncated=1)
    assert error_summary(session) == "1 error: 1 Python stack cut short (a looping or unreadable chain)"
    session.counters.update(stack_read_errors=1)
    cut = "1 Python stack cut short (a looping or unreadable chain)"
    assert error_summary(session) in (f"2 errors: 1 stack copy failed, {cut}", f"2 errors: {cut}, 1 stack copy failed")


def test_process_labels_keep_what_tells_multiprocessing_s_processes_apart():
    """Cut at 60 characters, every worker, the resource tracker and the forkserver of a pool were labelled
    ".../bin/python -B -c from multip..." (a sweep): 160 are kept, a spawn worker's whole command line."""
    from profiler.tree.calltree import process_labels

    session = Session(SessionMeta(pid=1, command=["python"]))
    spawn = ["/root/.pyenv/versions/3.12.1/bin/python", "-B", "-c", "from multiprocessing.spawn import spawn_main; "
             "spawn_main(tracker_fd=8, pipe_handle=10)", "--multiprocessing-fork"]  # fmt: skip
    session.meta.processes = {1: ["/usr/bin/python3", "pool.py"], 2: spawn}
    for pid in (1, 2):
        session.thread_index(pid, pid, 1, "MainThread")
    labels = process_labels(session)
    assert labels[1] == "pid 1 [/usr/bin/python3 pool.py]"
    assert labels[2] == f"pid 2 [{' '.join(spawn)}]"
