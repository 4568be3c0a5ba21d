"""What the end of a recording says when much of the profile went through functions without a name (had one
on its stack, not only as its leaf: a thread's entry in a stripped library is on all of its stacks): one line
for all such modules (stripped of their symbol tables, with no debug file found), how much of the profile,
the modules most of it went through, and what a user can do for each kind of file. Such frames show as
``module+0xOFFSET``; a top table led by ``libz.so.1.2.13+0x5d80`` is of little use until the reader knows
that a package installs the names. One line for all of them, with advice per kind of file
(docs/decisions/true-notices.md).

The kinds of file, and what names their functions:

* a file of a distribution's package (dpkg knows it): its debug package. The package that shipped the file
  is asked of dpkg, and the debug package of it of apt: a hand-made ``-dbg`` package where the
  distribution ships one, named after the source package (``python3.11-dbg`` holds the symbols of
  ``libpython3.11``'s library) or the binary one (``libc6-dbg``), else the automatic ``<package>-dbgsym``
  of its debug archive (Debian's debian-debug, Ubuntu's ddebs), which apt may not know until that archive
  is added; or its debug file fetched by build-id from the distribution's debuginfod server. A ``-dbg``
  package installed at the library's own version has not put the debug file where it belongs, so it is
  not the one (``libpython3.11-dbg`` is Debian's debug build of the library, not its symbols);
* a file of a pip wheel (under ``site-packages`` or ``dist-packages``, of no package): nothing, no symbols
  are published for wheels;
* any other stripped file: its debug file, by build-id (``/usr/lib/debug/.build-id``, or fetched from a
  debuginfod server that has it), or a build that keeps its symbol table;
* a file with a symbol table that covers none of these functions (hand-written assembly): nothing to add.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Mapping

from profiler.binary.objfile import ObjectFile
from profiler.config import ExportConfig
from profiler.profile.session import Session
from profiler.tree.calltree import included

#: a module is named when at least this share of the samples (idle ones left out, as in the top table), and
#: this many, ran in its functions without a name: as for the notices of sampling/notices.py, below 1% no
#: line of the top table is at stake, and a handful of samples is noise
NOTICE_SHARE = 0.01
NOTICE_MIN_SAMPLES = 10
#: the modules the line names with their shares, and per kind of file, before "and N more"
NAMED = 3
#: what names the functions of a stripped file no package of this system installed (a program built here,
#: a file in a container); a debuginfod-find(1) fetch puts a debug file where nprof looks
#: (``binary/debugfile.py``): it reads the build-id of the FILE it is given
UNPACKAGED_ADVICE = "a build that keeps its symbol table (not stripped, no -s) names them"
#: the directories pip installs wheels into, as a path component (a distribution's own Python packages are
#: there too, under /usr/lib/python3/dist-packages, but dpkg knows those)
WHEEL_DIRECTORIES = ("site-packages", "dist-packages")
#: seconds dpkg-query and apt-cache may take (apt-cache reads every package list: 0.6 s measured here)
PACKAGE_QUERY_TIMEOUT = 10.0


def missing_symbol_notices(
    session: Session, unnamed: Mapping[int, int], objects: Mapping[int, ObjectFile], shown: ExportConfig | None = None
) -> list[str]:
    """One line, if the modules whose unnamed functions (``unnamed``: frame id -> module id) were on the stack
    of enough samples are any: of the samples the outputs show (``shown``; by default, idle ones left out).
    With --gil, the share of every sample said 54% of a profile ran in libcrypto, which the profile itself
    did not hold (hashlib releases the GIL; a sweep)."""
    if not unnamed:
        return []
    shown = shown or ExportConfig()
    modules_of: dict[int, frozenset[int]] = {}  # stack id -> modules with an unnamed frame on it
    by_modules: Counter[frozenset[int]] = Counter()  # the samples of each set of such modules
    total = 0
    for (_thread, sid, _stop, cls), n in session.samples.items():
        if not included(cls, shown):
            continue
        total += n
        found = modules_of.get(sid)
        if found is None:
            found = modules_of[sid] = frozenset(unnamed[f] for f in session.stacks.frames(sid) if f in unnamed)
        if found:
            by_modules[found] += n
    hits: Counter[int] = Counter()
    for found, n in by_modules.items():
        for mid in found:
            hits[mid] += n
    due = [(mid, n) for mid, n in hits.most_common() if n >= NOTICE_MIN_SAMPLES and n >= NOTICE_SHARE * total]
    if not due:
        return []
    due_ids = frozenset(mid for mid, _n in due)
    any_due = sum(n for found, n in by_modules.items() if found & due_ids)
    stripped = {mid: objects[mid] for mid, _n in due if mid in objects and _stripped(objects[mid])}
    packages = _debug_packages(list(stripped.values()))
    labels = {mid: os.path.basename(session.modules[mid].path) for mid, _n in due}
    kinds: dict[str, list[str]] = {}  # what to do -> the modules it is for, most samples first
    for mid, _n in due:
        path = session.modules[mid].path
        advice = _what_names(path, objects.get(mid), packages)
        # named by its path where the advice is to give the FILE to debuginfod-find
        kinds.setdefault(advice, []).append(path if "FILE" in advice else labels[mid])
    count = len(due)
    top = _listed([f"{labels[mid]} {100 * n / total:.1f}%" for mid, n in due])
    said = [f"{_listed(names)}: {advice}" for advice, names in kinds.items()]
    return [f"{100 * any_due / total:.1f}% of the samples went through functions without a symbol, shown as "
            f"MODULE+0xOFFSET, in {count} module{'s' if count != 1 else ''} ({top}); " + "; ".join(said)]  # fmt: skip


def _listed(names: list[str]) -> str:
    """The first ``NAMED`` of ``names``, then how many more."""
    shown = ", ".join(names[:NAMED])
    return shown if len(names) <= NAMED else f"{shown} and {len(names) - NAMED} more"


def _stripped(obj: ObjectFile) -> bool:
    return ".symtab" not in obj.elf.sections


def is_wheel_file(path: str) -> bool:
    """A file pip installed: under a ``site-packages`` or ``dist-packages`` directory (a wheel's bundled
    libraries too, such as ``numpy.libs/``)."""
    return any(part in WHEEL_DIRECTORIES for part in path.split("/"))


def _what_names(path: str, obj: ObjectFile | None, packages: Mapping[str, str]) -> str:
    """What a user can do to name the functions of the module at ``path``, as the line says it for each kind of
    file (see the module's docstring); the same words for modules of the same kind, which the line lists
    together."""
    if obj is None:
        return "could not be read"
    if not _stripped(obj):
        return "not stripped, but no symbol covers these functions (code without symbols, such as assembly)"
    advice = packages.get(obj.path)
    if advice is not None:
        fetch = (", or `debuginfod-find debuginfo FILE` fetches them from the distribution's debuginfod server "
                 "(DEBUGINFOD_URLS)") if obj.build_id else ""  # fmt: skip
        return advice + fetch
    if is_wheel_file(path):
        return "from pip wheels, for which no symbols are published: nothing to install"
    if obj.build_id:
        return ("stripped, and no debug file was found by build-id under /usr/lib/debug/.build-id: a debug file "
                "put there, or fetched by `debuginfod-find debuginfo FILE` from a debuginfod server that has it "
                f"(DEBUGINFOD_URLS), or {UNPACKAGED_ADVICE}")  # fmt: skip
    return f"stripped, without a build-id: {UNPACKAGED_ADVICE}"


def _debug_packages(objects: list[ObjectFile]) -> dict[str, str]:
    """Path -> the advice that names the package to install, for those of the (stripped) ``objects`` that
    are files of this system's dpkg database; files of a target with another root (a container) are left
    out: its packages are not this system's."""
    shipped: dict[str, str] = {}
    for obj in objects:
        if obj.in_system_root:
            package = _package_of(obj.path)
            if package is not None:
                shipped[obj.path] = package
    if not shipped:
        return {}
    installed = _installed(set(shipped.values()))
    candidates = {p: _candidates(p, installed.get(p, ("", ""))[1]) for p in set(shipped.values())}
    names = {name for found in candidates.values() for name in found}
    known, installed = _apt_knows(sorted(names)), {**installed, **_installed(names)}
    advice = {}
    for path, package in shipped.items():
        name = choose_debug_package(package, candidates[package], known, installed)
        if name is not None:
            advice[path] = f"`apt install {name}` installs their names"
        else:
            advice[path] = (f"their names are in the {package}-dbgsym package of the distribution's debug archive "
                            "(Debian: debian-debug, Ubuntu: ddebs)")  # fmt: skip
    return advice


def _candidates(package: str, source: str) -> list[str]:
    """The names a package's debug symbols may go by, preferred first (see the module's docstring)."""
    names = [f"{source}-dbg"] if source and source != package else []
    return [*names, f"{package}-dbg", f"{package}-dbgsym"]


def choose_debug_package(
    package: str, candidates: list[str], known: set[str], installed: Mapping[str, tuple[str, str]]
) -> str | None:
    """The first of ``candidates`` that apt ``known``s and that is not installed at ``package``'s version
    (``installed``: name -> (version, source package)); None if none is."""
    version = installed.get(package, ("", ""))[0]
    for name in candidates:
        if name in known and not (version and installed.get(name, ("", ""))[0] == version):
            return name
    return None


def _installed(names: set[str]) -> dict[str, tuple[str, str]]:
    """Name -> (version, source package) of each of ``names`` that dpkg has installed."""
    out = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${source:Package}\t${db:Status-Abbrev}\n",
                *sorted(names)])  # fmt: skip
    found = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 4 and fields[3].startswith("ii"):
            found[fields[0]] = (fields[1], fields[2])
    return found


def _package_of(path: str) -> str | None:
    """The dpkg package that shipped ``path``: asked by the path as mapped, and as it was before /usr was
    merged (/usr/lib/x86_64-linux-gnu/libz.so.1 is /lib/x86_64-linux-gnu/libz.so.1 in dpkg's database)."""
    candidates = [path]
    if path.startswith("/usr/"):
        candidates.append(path[4:])
    for candidate in candidates:
        out = _run(["dpkg-query", "-S", candidate])
        for line in out.splitlines():
            owners, sep, _rest = line.partition(": ")
            if sep and not line.startswith("diversion "):
                return owners.split(",")[0].strip().split(":")[0]
    return None


def _apt_knows(names: list[str]) -> set[str]:
    """Which of ``names`` apt has a package of (one ``apt-cache show`` for them all)."""
    out = _run(["apt-cache", "show", "--no-all-versions", *sorted(names)])
    return {line[9:].strip() for line in out.splitlines() if line.startswith("Package: ")}


def _run(argv: list[str]) -> str:
    """A query's standard output; empty if the tool is missing, fails to start, or runs too long."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=PACKAGE_QUERY_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout
