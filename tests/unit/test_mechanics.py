"""The summary table's lines for a runtime's mechanisms (GIL hand-off, waiting for the GIL, garbage collection,
import) and its Python self column, over small stacks built by hand (profiler/tree/mechanics.py, issue 44)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents.cpython.mechanics import InterpreterMechanics, python_mechanism
from profiler.cli.status import top_table
from profiler.config import ExportConfig
from profiler.model import FrameInfo, FrameKind, Mechanism, SampleClass, StopReason
from profiler.profile.session import Session, SessionMeta
from profiler.tree.totals import function_totals

LIBC, PY = "libc.so.6", "libpython3.11.so.1.0"
GIL_HANDOFF, GIL_WAIT, GC, IMPORT = Mechanism.GIL_HANDOFF, Mechanism.GIL_WAIT, Mechanism.GC, Mechanism.IMPORT


def native(name: str, module: str = PY, mechanism: Mechanism | None = None, **kw: object) -> FrameInfo:
    return FrameInfo(name, module=module, mechanism=mechanism, **kw)  # type: ignore[arg-type]


def python(name: str, file: str = "app.py", mechanism: Mechanism | None = None) -> FrameInfo:
    return FrameInfo(name, file=file, mechanism=mechanism)


EVAL = native("_PyEval_EvalFrameDefault", interpreter=True)


def session_of(*stacks: tuple[list[FrameInfo], int], cls: SampleClass = SampleClass.RUNNING,
               inlined: dict[str, list[FrameInfo]] | None = None) -> Session:  # fmt: skip
    """A session of ``stacks`` (frames outermost first, and their samples); a frame is keyed by its name, so
    the same name is the same frame; ``inlined``: name -> the calls inlined at that frame."""
    session = Session(SessionMeta(pid=7, command=["app"]))
    thread = session.thread_index(7, 7, 1, "app")
    keys: dict[str, tuple[int, int, int, int]] = {}
    infos: dict[tuple[int, int, int, int], FrameInfo] = {}
    for frames, n in stacks:
        path = []
        for frame in frames:
            kind = FrameKind.RUNTIME if frame.file is not None else FrameKind.NATIVE
            key = keys.setdefault(frame.name, (kind, 0, 0x1000 + len(keys), 0))
            infos[key] = frame
            path.append(key)
        sid = session.intern_stack(tuple(reversed(path)))  # (interned innermost first)
        session.add_sample(thread, sid, StopReason.END_OF_STACK, cls, n)
    session.frame_info = [infos[session.frames.key(fid)] for fid in range(len(session.frames))]
    for name, calls in (inlined or {}).items():
        fid = next(f for f in range(len(session.frames)) if session.frame_info[f].name == name)
        session.inlined[fid] = [replace(c, inlined=True) for c in calls]
    return session


def lines(session: Session, config: ExportConfig | None = None) -> dict[str, tuple[int, int, int]]:
    """label -> (self, total, Python self) samples."""
    totals, _samples = function_totals(session, config or ExportConfig())
    return {t.label: (t.self_samples, t.total_samples, t.python_samples) for t in totals}


HANDLER = [native("_start"), EVAL, python("handle")]


def test_a_futex_wake_under_drop_gil_is_the_gil_handoff_line():
    """The web app's top line was ``32.1% __GI___lll_lock_wake (libc.so.6)``: its request threads releasing
    the GIL around each socket call. The table names it; the handler keeps the time as its Python self."""
    release = [native("sock_recv"), native("PyEval_SaveThread", mechanism=GIL_HANDOFF),
               native("drop_gil", mechanism=GIL_HANDOFF), native("___pthread_mutex_unlock", LIBC),
               native("__GI___lll_lock_wake", LIBC)]  # fmt: skip
    session = session_of((HANDLER + release, 32), (HANDLER + [native("json_encode")], 68))
    got = lines(session)
    assert got["[GIL hand-off]"] == (32, 32, 0)
    assert got["__GI___lll_lock_wake (libc.so.6)"][0] == 0, "the wake's self is the line's"
    assert got["handle (app.py)"] == (0, 100, 100), "Python self: every sample, whatever ran below"
    table = top_table(session, ExportConfig()).splitlines()
    assert table[1] == "   self%  total%  py-self%  function"
    assert table[2] == "    0.0%  100.0%    100.0%  handle (app.py)"
    assert table[3] == "   68.0%   68.0%         -  json_encode (libpython3.11.so.1.0)"
    assert table[4] == "   32.0%   32.0%         -  [GIL hand-off]"
    assert table[-1].startswith("  [GIL hand-off]: releasing the GIL and waking a thread that waits for it")


def test_take_gil_waking_a_waiter_hands_over_and_waiting_is_waiting():
    """In take_gil, a thread asleep on the GIL's condition waits; one unlocking the GIL's mutex (and waking
    another thread queued on it) hands over. glibc's waiter-side ``__condvar_confirm_wakeup`` is a wait."""
    take = [native("PyEval_RestoreThread", mechanism=GIL_WAIT), native("take_gil", mechanism=GIL_WAIT)]
    session = session_of(
        (HANDLER + take + [native("___pthread_cond_timedwait", LIBC), native("__futex_abstimed_wait_common", LIBC)], 5),
        (HANDLER + take + [native("___pthread_cond_timedwait", LIBC), native("__condvar_confirm_wakeup", LIBC)], 2),
        (HANDLER + take + [native("___pthread_mutex_unlock", LIBC), native("__GI___lll_lock_wake", LIBC)], 3),
        cls=SampleClass.GIL_WAIT,
    )
    got = lines(session, ExportConfig(idle=True))
    assert got["[waiting for the GIL]"][0] == 7 and got["[GIL hand-off]"][0] == 3


def test_a_finalizer_run_by_the_collector_is_its_own_time():
    """A ``__del__`` the collector calls is that function's; the collector's own passes are its line, and its
    total holds both."""
    collect = [native("gc_collect", mechanism=GC), native("gc_collect_main", mechanism=GC)]
    session = session_of(
        (HANDLER + collect + [native("subtract_refs", mechanism=GC), native("dict_traverse")], 6),
        (HANDLER + collect + [native("finalize_garbage", mechanism=GC), native("slot_tp_finalize"), EVAL,
                              python("__del__"), native("list_append")], 4),  # fmt: skip
    )
    got = lines(session)
    assert got["[garbage collection]"] == (6, 10, 0)
    assert got["list_append (libpython3.11.so.1.0)"][0] == 4 and got["__del__ (app.py)"][2] == 4
    assert got["handle (app.py)"][2] == 6


BOOTSTRAP = "<frozen importlib._bootstrap>"


def test_an_imported_modules_body_is_its_own_and_its_loading_the_imports():
    """Loading a module (importlib's frames, unmarshalling its code) is the import line's, Python self
    included; the module's own code is its own, in the import line's total only."""
    load = [native("PyImport_ImportModuleLevelObject", mechanism=IMPORT), EVAL,
            python("_find_and_load", BOOTSTRAP, IMPORT), python("get_code", "<frozen importlib._bootstrap_external>",
                                                                   IMPORT)]  # fmt: skip
    body = [native("builtin_exec"), python("<module>", "mod.py"), python("setup", "mod.py")]
    session = session_of((HANDLER + load + [native("marshal_loads"), native("r_object")], 3),
                         (HANDLER + load + body + [native("long_add")], 7))  # fmt: skip
    got = lines(session)
    assert got["[import]"] == (3, 10, 3)
    assert got["long_add (libpython3.11.so.1.0)"][0] == 7 and got["setup (mod.py)"][2] == 7
    assert got["_find_and_load (<frozen importlib._bootstrap>)"][2] == 0, "importlib's frames are the line's"


def test_a_drop_gil_inlined_into_the_eval_loop_is_met_after_the_python_frames_it_runs():
    """A call inlined into the eval loop (CPython's eval_frame_handle_pending, and the drop_gil an optimised
    build inlines into it) runs for the newest Python frame of that loop: shown after it, it is the innermost
    mechanism of a sample that sleeps in the condition wait below, though the loop's frame is outward."""
    loop = native("_PyEval_EvalFrameDefault", interpreter=True)
    session = session_of(
        ([native("_start"), loop, python("spin"), native("___pthread_cond_wait", LIBC)], 5),
        inlined={"_PyEval_EvalFrameDefault": [native("eval_frame_handle_pending"),
                                              native("drop_gil", mechanism=GIL_HANDOFF)]},  # fmt: skip
    )
    got = lines(session)
    assert got["[GIL hand-off]"][0] == 5 and got["spin (app.py)"][2] == 5


def test_gil_waits_left_out_with_the_idle_ones_are_said_under_the_table():
    """Without --idle, a server's threads queueing for the GIL are not in the table: a line says how many."""
    session = session_of((HANDLER + [native("work")], 60))
    wait = session_of((HANDLER + [native("take_gil", mechanism=GIL_WAIT)], 40), cls=SampleClass.GIL_WAIT)
    for key, n in wait.samples.items():  # the waits' stacks added to the first session
        frames = tuple(wait.frames.key(f) for f in reversed(wait.stacks.frames(key[1])))
        session.add_sample(key[0], session.intern_stack(frames), StopReason.END_OF_STACK, SampleClass.GIL_WAIT, n)
    session.frame_info = [*session.frame_info, native("take_gil", mechanism=GIL_WAIT)]
    table = top_table(session, ExportConfig())
    assert table.endswith("  and 40 samples (40.0% of all) were [waiting for the GIL], left out with the idle ones: "
                          "--idle shows them")  # fmt: skip


def test_without_native_frames_there_is_no_python_self_column():
    """``--no-native``: every leaf is a Python frame, so self is Python self."""
    session = session_of(([python("main"), python("work")], 10))
    session.meta.native = False
    assert top_table(session, ExportConfig()).splitlines()[1] == "   self%  total%  function"


def test_a_session_file_keeps_each_frames_mechanism(tmp_path):
    """``nprof report`` shows the same lines as the recording: the mechanisms are saved with the names."""
    session = session_of((HANDLER + [native("drop_gil", mechanism=GIL_HANDOFF)], 3),
                         inlined={"handle": [python("x", BOOTSTRAP, IMPORT)]})  # fmt: skip
    session.save(str(tmp_path / "s.nprof"))
    loaded = Session.load(str(tmp_path / "s.nprof"))
    assert loaded.frame_info == session.frame_info and loaded.inlined == session.inlined


@pytest.mark.parametrize("filename, expected", [
    ("<frozen importlib._bootstrap>", IMPORT), ("<frozen importlib._bootstrap_external>", IMPORT),
    ("<frozen zipimport>", IMPORT), ("/usr/lib/python3.13/importlib/_bootstrap.py", IMPORT),
    ("/usr/lib/python3.13/importlib/metadata/__init__.py", None), ("app.py", None), (None, None),
])  # fmt: skip
def test_the_import_machinerys_python_frames_are_known_by_their_files(filename, expected):
    assert python_mechanism(filename) is expected


def test_an_interpreters_function_names_count_only_inside_its_code():
    """``collect`` is CPython 3.8's collector, and anybody's function elsewhere."""
    import numpy as np

    symbols = type("Symbols", (), {"addrs": np.array([0x1000, 0x5000]), "ends": np.array([0x1100, 0x9000]),
                                   "__len__": lambda self: 2})()  # fmt: skip
    mechanics = InterpreterMechanics(symbols, bias=0x7F0000000000)  # type: ignore[arg-type]
    assert mechanics.of(0x7F0000001010, "collect.constprop.0") is GC
    assert mechanics.of(0x7F0000008FFF, "take_gil.lto_priv.0") is GIL_WAIT
    assert mechanics.of(0x7F0000009000, "collect") is None, "past the interpreter's functions"
    assert mechanics.of(0x7F0000001010, "collect_garbage_now") is None
