"""Interning tables, the bounded-memory property, and the .nprof session file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

from profiler.errors import SessionFormatError
from profiler.model import FrameInfo, FrameKind, Module, SampleClass, StopReason
from profiler.profile.memo import FrameMemo
from profiler.profile.session import Session, SessionMeta
from profiler.profile.tables import FrameTable, StackTable


def key(i: int) -> tuple[int, int, int, int]:
    return (FrameKind.NATIVE, 0, 0x1000 + i, 0)


def test_prefix_tree_shares_prefixes():
    stacks = StackTable()
    a = stacks.intern([1, 2, 3])
    b = stacks.intern([1, 2, 4])
    assert stacks.intern([1, 2, 3]) == a
    assert len(stacks) == 4  # (1), (1,2), (1,2,3), (1,2,4)
    assert stacks.frames(a) == [1, 2, 3] and stacks.frames(b) == [1, 2, 4]
    assert stacks.intern([]) == -1


class DictStackTable:
    """The prefix tree by its definition: a node per distinct (parent, frame), numbered as first met."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, int], int] = {}

    def intern(self, frame_ids: list[int]) -> int:
        sid = -1
        for fid in frame_ids:
            sid = self.ids.setdefault((sid, fid), len(self.ids))
        return sid


def random_stacks(rng: np.random.Generator, n: int) -> list[list[int]]:
    """Stacks that share prefixes of every length and branch at every depth, the root included: each is a
    prefix of an earlier one (or nothing) followed by fresh random frames from a small alphabet."""
    stacks: list[list[int]] = [[]]
    for _ in range(n):
        base = stacks[int(rng.integers(len(stacks)))]
        cut = int(rng.integers(len(base) + 1))
        stacks.append(base[:cut] + rng.integers(0, 6, int(rng.integers(0, 8))).tolist())
    return stacks


def test_stack_ids_are_those_of_the_definition_also_after_a_reload():
    """Interning gives the ids a (parent, frame) dict gives, in the same order, for a table built here and for
    one loaded from its columns and interned into further (nodes gaining a first, second and third child)."""
    rng = np.random.default_rng(11)
    stacks = random_stacks(rng, 3000)
    table, reference = StackTable(), DictStackTable()
    for frames in stacks[:1500]:
        assert table.intern(frames) == reference.intern(frames)
    loaded = StackTable.from_columns({k: v.copy() for k, v in table.columns().items()})
    for frames in rng.permutation(np.array(stacks, dtype=object)):
        sid = reference.intern(frames)
        assert loaded.intern(frames) == sid and table.intern(frames) == sid
        assert loaded.frames(sid) == frames
    assert len(loaded) == len(table) == len(reference.ids)
    for name, column in loaded.columns().items():
        assert np.array_equal(column, table.columns()[name]), name


def test_a_chain_costs_its_columns_not_an_entry_each():
    """Nodes with one child, most of a profile's tree, take no dict entry: 100,000 nodes in 1,000 chains that
    branch at their root take ~12 bytes each (the (parent, frame) dict took ~180)."""
    table = StackTable()
    table.intern([0])
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for chain in range(1000):
        table.intern([0, *range(chain * 100 + 1, chain * 100 + 100), 1])
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(table) == 1 + 1000 * 100
    assert grown / 100_000 < 24, f"{grown / 100_000:.0f} bytes a node"


def test_frame_table_roundtrip():
    frames = FrameTable()
    ids = [frames.intern(key(i)) for i in range(3000)]  # forces several capacity doublings
    assert ids == list(range(3000)) and frames.intern(key(7)) == 7
    again = FrameTable.from_columns({k: v.copy() for k, v in frames.columns().items()})
    assert again.key(2999) == key(2999) and again.intern(key(5)) == 5


def test_memory_does_not_grow_with_samples():
    """200k samples over a stable set of stacks: memory after the first 20k stays flat."""
    session = Session(SessionMeta(pid=1, command=["x"]))
    thread = session.thread_index(1, 1, 0, "main")
    rng = np.random.default_rng(7)
    distinct = [tuple(key(int(f)) for f in rng.integers(0, 200, size=int(d))) for d in rng.integers(5, 40, 300)]
    choice = rng.integers(0, len(distinct), 200_000)

    def record(indices) -> None:
        for i in indices:
            sid = session.intern_stack(distinct[i])
            session.add_sample(thread, sid, StopReason.END_OF_STACK, SampleClass.RUNNING)

    record(range(len(distinct)))  # every distinct stack seen once
    record(choice[:20_000])
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    record(choice[20_000:])
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert session.total_samples == 200_000 + len(distinct)
    assert after - before < 64 * 1024, f"memory grew by {after - before} bytes over 180k samples"
    assert len(session.samples) <= len(distinct)


def make_session() -> Session:
    session = Session(SessionMeta(pid=42, command=["prog", "--flag"], rate=99.0))
    session.modules = [Module(0, "/bin/prog", "abcd", 0x1000, 0x2000, 0x1000)]
    t = session.thread_index(42, 42, 1234, "prog")
    s1 = session.intern_stack((key(3), key(2), key(1)))
    s2 = session.intern_stack((key(4), key(1)))
    session.add_sample(t, s1, StopReason.END_OF_STACK, SampleClass.RUNNING, 5)
    session.add_sample(t, s2, StopReason.WINDOW_EXHAUSTED, SampleClass.IDLE, 2)
    session.count("ticks", 7)
    session.frame_info = [FrameInfo(f"f{i}", module="prog") for i in range(len(session.frames))]
    return session


def test_session_file_roundtrip(tmp_path):
    path = str(tmp_path / "s.nprof")
    original = make_session()
    original.save(path)
    loaded = Session.load(path)
    assert loaded.meta == original.meta
    assert loaded.threads == original.threads and loaded.modules == original.modules
    assert loaded.samples == original.samples and loaded.counters == original.counters
    assert loaded.frame_info == original.frame_info
    assert [loaded.stacks.frames(s) for s in range(len(loaded.stacks))] == [
        original.stacks.frames(s) for s in range(len(original.stacks))
    ]


def test_session_file_rejects_corruption(tmp_path):
    path = tmp_path / "s.nprof"
    make_session().save(str(path))
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    # a stack whose parent points forward: an index out of range must be refused, not followed
    bad = dict(members)
    parent = np.load(__import__("io").BytesIO(members["stacks_parent.npy"]))
    parent[0] = 5
    buf = __import__("io").BytesIO()
    np.save(buf, parent)
    bad["stacks_parent.npy"] = buf.getvalue()
    corrupt = tmp_path / "corrupt.nprof"
    with zipfile.ZipFile(corrupt, "w") as z:
        for name, data in bad.items():
            z.writestr(name, data)
    with pytest.raises(SessionFormatError, match="stack table out of range"):
        Session.load(str(corrupt))
    truncated = tmp_path / "truncated.nprof"
    truncated.write_bytes(path.read_bytes()[:100])
    with pytest.raises(SessionFormatError):
        Session.load(str(truncated))
    with pytest.raises(SessionFormatError, match="no such file"):
        Session.load(str(tmp_path / "missing.nprof"))


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"main;a;b;c 12\nmain;a 3\n", "(it is folded stacks)"),
        (b'{"$schema": "https://www.speedscope.app/file-format-schema.json", "profiles": []}',
         "(it is a speedscope JSON profile)"),
        (b"\x1f\x8b\x08\x00", "(it is gzip-compressed: a pprof profile?)"),
        (b"", "(it is empty)"),
    ],
)  # fmt: skip
def test_another_output_given_as_a_session_says_what_it_is(tmp_path, content, said):
    """``nprof report out.folded``: the other files nprof writes are named, not taken for a pickle (numpy's
    own guess for anything that is not a zip, which it put in the error)."""
    path = tmp_path / "profile.out"
    path.write_bytes(content)
    with pytest.raises(SessionFormatError) as error:
        Session.load(str(path))
    assert f"not an nprof session file {said}" in str(error.value) and "pickle" not in str(error.value)


def test_session_file_version_mismatch(tmp_path, monkeypatch):
    path = str(tmp_path / "s.nprof")
    monkeypatch.setattr("profiler.profile.session.FORMAT_VERSION", 99)
    make_session().save(path)
    monkeypatch.setattr("profiler.profile.session.FORMAT_VERSION", 2)
    with pytest.raises(SessionFormatError, match="version 99 is not supported"):
        Session.load(path)


def test_a_frame_memo_starts_over_once_its_keys_hold_its_frames():
    """Bounded by the frames its keys hold, not by its entries: a few deep stacks fill it as many shallow
    ones do (``profile/memo.py``)."""
    memo: FrameMemo[int] = FrameMemo(max_frames=100)
    memo.put("deep", 1, 60)
    memo.put("deeper", 2, 60)  # 60 held before it: kept, now 120
    assert memo.get("deep") == 1 and memo.get("deeper") == 2
    memo.put("shallow", 3, 1)  # past the bound: started over first
    assert memo.get("deep") is None and memo.get("shallow") == 3 and len(memo) == 1


def test_a_session_whose_compressed_bytes_are_damaged_is_refused_as_corrupt(tmp_path):
    """Damaged deflate data in a member makes zlib fail before zipfile's CRC check could: that error
    (zlib.error) went up as an internal error with a traceback (21 of 84 damaged copies in a sweep)."""
    path = tmp_path / "s.nprof"
    make_session().save(str(path))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        member = max(z.infolist(), key=lambda info: info.compress_size)
    assert member.compress_type == zipfile.ZIP_DEFLATED
    start = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra)  # APPNOTE 4.3.7
    for i in range(start + 2, start + member.compress_size // 2):
        data[i] ^= 0x5A
    damaged = tmp_path / "damaged.nprof"
    damaged.write_bytes(bytes(data))
    with pytest.raises(SessionFormatError, match="corrupt or truncated session file"):
        Session.load(str(damaged))


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def test_a_session_written_before_the_profile_had_its_room_loads_and_renders_the_same(tmp_path):
    """``fixtures/c_heavy-2026-11-29.nprof``: 0.3 s of ``tests/targets/python/c_heavy.py`` on CPython 3.11,
    written by nprof as of 2026-11-29, when the session lived in ``profiler/sampling``; its folded rendering
    then is the ``.folded`` beside it, a frame per line sampled. Every later nprof must load it and render it
    the same with ``--lines``, but for the paths outputs shorten since (issue 44: those under the standard
    library's and site-packages' directories; the session keeps no build roots for the native ones); and per
    function by default."""
    session = Session.load(os.path.join(FIXTURES, "c_heavy-2026-11-29.nprof"))
    assert session.total_samples == 68 and len(session.threads) == 1
    rendered = {}
    for view in ("--lines", "--function"):
        out = tmp_path / f"again{view}.folded"
        command = [sys.executable, "-m", "profiler", "report", os.path.join(FIXTURES, "c_heavy-2026-11-29.nprof"),
                   "-o", str(out), view]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        rendered[view] = out.read_text(encoding="utf-8")
    with open(os.path.join(FIXTURES, "c_heavy-2026-11-29.folded"), encoding="utf-8") as expected:
        then = expected.read()
    stdlib = "/root/.pyenv/versions/3.11.7/lib/python3.11/"
    assert rendered["--lines"] == then.replace(f"{stdlib}site-packages/", "").replace(stdlib, "")
    per_function = [line.rpartition(" ") for line in rendered["--function"].splitlines()]
    assert sum(int(n) for _stack, _, n in per_function) == 68
    assert not [stack for stack, _, _n in per_function if re.search(r":\d+\)(;|$)", stack)], "a line in a frame"
    assert len(per_function) < len(then.splitlines()), "lines of a function merged"
