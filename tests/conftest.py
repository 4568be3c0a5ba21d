"""Session-wide fixtures: test targets built once, and the leak guard that runs after every test."""

from __future__ import annotations

import inspect
import os
import signal

import pytest

from tests.support.targets import FRAME_POINTERS, NO_FRAME_POINTERS, build_c


def _children_of(pid: int) -> list[tuple[int, str, int]]:
    """(pid, state, tracer pid) of every live descendant of ``pid``."""
    parents: dict[int, int] = {}
    info: dict[int, tuple[str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        p = int(entry)
        parents[p] = int(fields["PPid"])
        info[p] = (fields["State"].split()[0], int(fields["TracerPid"]))
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for p, pp in parents.items():
            if pp == parent:
                found.append(p)
                frontier.append(p)
    return [(p, *info[p]) for p in found if info[p][0] != "Z"]


def _traced_by_us() -> list[tuple[int, int]]:
    me = os.getpid()
    ours = set()
    for p in {me} | {p for p, _s, _t in _children_of(me)}:  # a tracer's TracerPid is the tracing thread's id
        try:
            ours.update(int(t) for t in os.listdir(f"/proc/{p}/task"))
        except OSError:
            ours.add(p)
    traced = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for tid in os.listdir(f"/proc/{entry}/task"):
                with open(f"/proc/{entry}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("TracerPid:") and int(line.split()[1]) in ours:
                            traced.append((int(tid), int(line.split()[1])))
        except OSError:
            continue
    return traced


#: calls by which a test (or a fixture it uses, or a helper of tests/support it calls) starts a process
SPAWNS = ("subprocess.", "build_c(", "run_nprof", "running_target(", "Popen(", "os.fork(", "readelf_", "addr2line(",
          "read_frames(", "nm_functions(", "instructions(", "python_running(", "attached(")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """The tests of Ctrl-C start nprof as a terminal does, with SIGINT's default action. A suite started in
    the background of a script (``.ci/run &``, ``nohup``) has SIGINT ignored (POSIX, for asynchronous lists),
    every process it starts inherits that, and nprof rightly keeps it so for its command (``stop.py``):
    three tests failed so. Python's handler here makes each child start with the default again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``ptrace`` (pyproject.toml) every test of tests/integration, which traces real processes, and every
    other test whose code, or the code of a fixture it uses, starts a process (``SPAWNS``): what is left,
    ``pytest -m "not ptrace"``, is the pure tests."""
    integration = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integration") + os.sep
    sources: dict[object, str] = {}
    for item in items:
        if str(item.path).startswith(integration) or _spawns(item, sources):
            item.add_marker(pytest.mark.ptrace)


def _spawns(item: pytest.Item, sources: dict[object, str]) -> bool:
    functions = [getattr(item, "function", None)]
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    functions += [definition.func for definitions in fixtures.values() for definition in definitions]
    for function in functions:
        if function is None:
            continue
        if function not in sources:
            try:
                sources[function] = inspect.getsource(function)
            except (OSError, TypeError):
                sources[function] = ""
        if any(call in sources[function] for call in SPAWNS):
            return True
    return False


@pytest.fixture(autouse=True)
def leak_guard():
    """After each test: no child left running, no thread left attached to pytest or its children."""
    yield
    leftovers = _children_of(os.getpid())
    traced = _traced_by_us()
    for p, _state, _tracer in leftovers:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not traced, f"threads left attached (tid, tracer): {traced}"
    assert not leftovers, f"child processes left running (pid, state, tracer): {leftovers}"


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("targets"))


@pytest.fixture(scope="session")
def chain_fp(build_dir) -> str:
    """tests/targets/chain.c with frame pointers."""
    return build_c("chain.c", build_dir, FRAME_POINTERS, name="chain-fp")


@pytest.fixture(scope="session")
def main_exits_fp(build_dir) -> str:
    """tests/targets/main_exits.c with frame pointers: main calls pthread_exit, a thread works on."""
    return build_c("main_exits.c", build_dir, FRAME_POINTERS, name="main-exits-fp")


@pytest.fixture(scope="session")
def epilogue_fp(build_dir) -> str:
    """tests/targets/epilogue.c with frame pointers: samples in epilogues, after `pop %rbp`."""
    return build_c("epilogue.c", build_dir, FRAME_POINTERS, name="epilogue-fp")


@pytest.fixture(scope="session")
def threads_fp(build_dir) -> str:
    return build_c("threads.c", build_dir, FRAME_POINTERS, name="threads-fp")


@pytest.fixture(scope="session")
def churn_fp(build_dir) -> str:
    return build_c("churn.c", build_dir, FRAME_POINTERS, name="churn-fp")


@pytest.fixture(scope="session")
def signals_fp(build_dir) -> str:
    return build_c("signals.c", build_dir, FRAME_POINTERS, name="signals-fp")


@pytest.fixture(scope="session")
def dormant_fp(build_dir) -> str:
    """tests/targets/dormant.c with frame pointers: many threads asleep for good, one that works when told."""
    return build_c("dormant.c", build_dir, FRAME_POINTERS, name="dormant-fp")


@pytest.fixture(scope="session")
def sleepers_fp(build_dir) -> str:
    """tests/targets/sleepers.c with frame pointers: threads asleep under a seccomp filter, one at work."""
    return build_c("sleepers.c", build_dir, FRAME_POINTERS, name="sleepers-fp")


@pytest.fixture(scope="session")
def forker_fp(build_dir) -> str:
    return build_c("forker.c", build_dir, FRAME_POINTERS, name="forker-fp")


@pytest.fixture(scope="session")
def vm_sharer_fp(build_dir) -> str:
    return build_c("vm_sharer.c", build_dir, FRAME_POINTERS, name="vm-sharer-fp")


@pytest.fixture(scope="session")
def startup_nofp(build_dir) -> str:
    """tests/targets/startup.c without frame pointers: its samples before main need ld.so's and libc's CFI."""
    return build_c("startup.c", build_dir, NO_FRAME_POINTERS, name="startup-nofp")


@pytest.fixture(scope="session")
def callback_lib(build_dir) -> str:
    """tests/targets/callback_lib.c as a shared library, without frame pointers."""
    return build_c("callback_lib.c", build_dir, ("-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC"),
                   name="callback_lib.so")  # fmt: skip


@pytest.fixture(scope="session")
def loader_and_libs(build_dir) -> tuple[str, list[str]]:
    """tests/targets/loader.c, and 12 copies of loaded_lib.c's library (one new mapping each), without
    frame pointers."""
    import shutil

    loader = build_c("loader.c", build_dir, NO_FRAME_POINTERS, name="loader")
    lib = build_c("loaded_lib.c", build_dir, (*NO_FRAME_POINTERS, "-shared", "-fPIC"), name="loaded_lib.so")
    copies = [os.path.join(build_dir, f"loaded_lib{i}.so") for i in range(12)]
    for copy in copies:
        shutil.copyfile(lib, copy)
    return loader, copies


@pytest.fixture(scope="session")
def swapped_libs(build_dir, loader_and_libs) -> tuple[str, list[str]]:
    """tests/targets/loader.c, and two builds of loaded_lib.c of one size whose spinning functions are
    named work_a and work_b."""
    loader, _ = loader_and_libs
    libs = [build_c("loaded_lib.c", build_dir, (*NO_FRAME_POINTERS, "-shared", "-fPIC", f"-DWORK=work_{v}"),
                    name=f"swapped_{v}.so") for v in "ab"]  # fmt: skip
    return loader, libs


@pytest.fixture(scope="session")
def embedder(build_dir) -> str:
    """tests/targets/embedder.c: a native program that dlopens libpython once it is traced."""
    return build_c("embedder.c", build_dir, FRAME_POINTERS, name="embedder")


@pytest.fixture(scope="session")
def forking_host(build_dir) -> str:
    """tests/targets/forking_host.c: a native program that starts CPython, then forks a child that runs it."""
    return build_c("forking_host.c", build_dir, FRAME_POINTERS, name="forking_host")


@pytest.fixture(scope="session")
def chain_nofp(build_dir) -> str:
    """tests/targets/chain.c without frame pointers: only DWARF CFI can unwind it."""
    return build_c("chain.c", build_dir, NO_FRAME_POINTERS, name="chain-nofp")


@pytest.fixture(scope="session")
def sort_cpp(build_dir) -> str:
    return build_c("sort.cpp", build_dir, NO_FRAME_POINTERS, name="sort-cpp", cxx=True)


@pytest.fixture(scope="session")
def sighandler_nofp(build_dir) -> str:
    return build_c("sighandler.c", build_dir, NO_FRAME_POINTERS, name="sighandler-nofp")


@pytest.fixture(scope="session")
def asm_kernels(build_dir) -> str:
    """Kernels without CFI for the unwinder's fallbacks (tests/targets/asm_kernels.c)."""
    return build_c("asm_kernels.c", build_dir, ("-O2",), name="asm_kernels")


@pytest.fixture(scope="session")
def duty_fp(build_dir) -> str:
    return build_c("duty.c", build_dir, FRAME_POINTERS, name="duty-fp")


@pytest.fixture(scope="session")
def blocked_nofp(build_dir) -> str:
    return build_c("blocked.c", build_dir, NO_FRAME_POINTERS, name="blocked-nofp")


@pytest.fixture(scope="session")
def rust_chain(build_dir) -> str:
    """tests/targets/rust_chain, a release build (no frame pointers on x86-64), built offline: no crates."""
    import shutil
    import subprocess

    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.path.exists(cargo):
        pytest.skip("cargo is not installed")
    src = os.path.join(build_dir, "rust_chain")
    shutil.copytree(os.path.join(os.path.dirname(__file__), "targets", "rust_chain"), src)
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(build_dir, "rust-target"))
    subprocess.run([cargo, "build", "--release", "--offline", "-q"], cwd=src, env=env, check=True)
    return os.path.join(build_dir, "rust-target", "release", "rust_chain")
