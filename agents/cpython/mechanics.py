"""Which of CPython's own functions are its GIL hand-off and wait, its garbage collector and its import
machinery (``profiler.model.Mechanism``), so that the summary table names that time instead of leaving it
to the C functions it ends in (``profiler/tree/mechanics.py``).

The names are those the interpreter's symbol tables and DWARF hold in the builds tested (pyenv 3.8.18,
3.9.18, 3.10.13, 3.11.7, 3.12.1, 3.13.0, Debian sid's 3.14; per version in
docs/decisions/summary-mechanics.md). A function counts only in the interpreter's own code (its address
is within the interpreter's functions): ``collect`` or ``import_name`` elsewhere is someone else's. A split
part (``take_gil.constprop.0``, ``gc_collect_main.lto_priv.0``) belongs to its function.

The exported wrappers (``PyEval_SaveThread``, ``PyEval_RestoreThread``, ``PyGC_Collect``,
``PyImport_*``) are listed beside the static functions they call, which a binary with ``.dynsym`` alone
(a distribution's stripped python3 without its debug file) does not name: the line then still says what
the time was. Where both are on a stack, the innermost decides, and that is the static one.

Python frames of the import machinery are those of importlib's bootstrap modules and zipimport, frozen
into the interpreter (``<frozen importlib._bootstrap>``) or read from the standard library's files
(``-X frozen_modules=off``, debug builds).
"""

from __future__ import annotations

from profiler.binary.symbols import SymbolTable
from profiler.model import Mechanism

#: releasing the GIL: ceval_gil.h (3.8-3.11, included into ceval.c) and ceval_gil.c (3.12+) ``drop_gil``,
#: 3.13+ ``drop_gil_impl``; the functions that call it to release the GIL around blocking calls
GIL_HANDOFF = frozenset({
    "drop_gil", "drop_gil_impl",
    "PyEval_SaveThread", "PyEval_ReleaseThread", "PyEval_ReleaseLock", "_PyEval_ReleaseLock",
})  # fmt: skip
#: waiting to take the GIL: ``take_gil`` (the sampler's GIL-wait class, ``anchors.GIL_WAIT_FUNCTIONS``),
#: and the functions that call it to take the GIL back
GIL_WAIT = frozenset({
    "take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread", "PyEval_AcquireLock", "_PyEval_AcquireLock",
})  # fmt: skip
#: the cyclic collector: its entry points (3.8-3.9 ``collect``, ``collect_with_callback``,
#: ``collect_generations``; 3.10-3.12 their ``gc_``-prefixed successors; 3.12+ ``_Py_RunGC`` from the eval
#: breaker; 3.13+ ``_PyGC_Collect``; ``gc.collect()``'s ``gc_collect``), and the phases of a collection, each
#: only ever called by one (Modules/gcmodule.c 3.8-3.12, Python/gc.c 3.13+)
GC = frozenset({
    "collect", "collect_with_callback", "collect_generations", "gc_collect_main", "gc_collect_with_callback",
    "gc_collect_generations", "_Py_RunGC", "_PyGC_Collect", "_PyGC_CollectNoFail", "_PyGC_CollectIfEnabled",
    "PyGC_Collect", "gc_collect", "gc_collect_impl",
    "deduce_unreachable", "update_refs", "subtract_refs", "move_unreachable", "untrack_tuples", "untrack_dicts",
    "move_legacy_finalizers", "move_legacy_finalizer_reachable", "handle_legacy_finalizers", "handle_weakrefs",
    "finalize_garbage", "check_garbage", "delete_garbage", "visit_decref", "visit_reachable", "visit_move",
    "invoke_gc_callback",
})  # fmt: skip
#: the import statement and the C API's imports (Python/import.c, importdl.c, ceval.c, bltinmodule.c):
#: ``import_name``/``import_from``/``import_all_from``/``import_star`` (3.8-3.13; 3.14's
#: ``_PyEval_ImportName``/``_PyEval_ImportFrom``), ``__import__``, the loading of an extension module
#: (``_PyImport_LoadDynamicModuleWithSpec`` to 3.12; 3.13+ ``_PyImport_RunModInitFunc``,
#: ``import_run_extension``)
IMPORT = frozenset({
    "PyImport_ImportModuleLevelObject", "PyImport_ImportModuleLevel", "PyImport_ImportModule",
    "PyImport_ImportModuleNoBlock", "PyImport_Import", "PyImport_ReloadModule", "PyImport_ExecCodeModule",
    "PyImport_ExecCodeModuleEx", "PyImport_ExecCodeModuleObject", "PyImport_ExecCodeModuleWithPathnames",
    "PyImport_ImportFrozenModule", "PyImport_ImportFrozenModuleObject", "PyImport_ImportModuleAttr",
    "PyImport_ImportModuleAttrString", "_PyImport_GetModuleAttr", "_PyImport_GetModuleAttrString",
    "import_find_and_load", "import_name", "import_from", "import_all_from", "import_star", "_PyEval_ImportName",
    "_PyEval_ImportFrom", "builtin___import__", "builtin___import___impl", "_PyImport_LoadDynamicModuleWithSpec",
    "_PyImport_RunModInitFunc", "import_run_extension",
})  # fmt: skip

#: function name -> its mechanism
FUNCTIONS: dict[str, Mechanism] = {
    **{name: Mechanism.GIL_HANDOFF for name in GIL_HANDOFF},
    **{name: Mechanism.GIL_WAIT for name in GIL_WAIT},
    **{name: Mechanism.GC for name in GC},
    **{name: Mechanism.IMPORT for name in IMPORT},
}

#: the import machinery's Python modules, as a code object's file names them when frozen (3.8+) ...
IMPORT_FROZEN_FILES = frozenset({
    "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>", "<frozen zipimport>",
})  # fmt: skip
#: ... and when read from the standard library
IMPORT_SOURCE_FILES = ("/importlib/_bootstrap.py", "/importlib/_bootstrap_external.py", "/zipimport.py")


def python_mechanism(filename: str | None) -> Mechanism | None:
    """The mechanism of a Python function by its code's file name: the import machinery's modules."""
    if filename is None:
        return None
    if filename in IMPORT_FROZEN_FILES or filename.endswith(IMPORT_SOURCE_FILES):
        return Mechanism.IMPORT
    return None


class InterpreterMechanics:
    """Native functions of one interpreter by name, counted only inside its functions' span (avma)."""

    def __init__(self, symbols: SymbolTable | None, bias: int) -> None:
        self.low = self.high = 0
        if symbols is not None and len(symbols):
            self.low = int(symbols.addrs.min()) + bias
            self.high = int(symbols.ends.max()) + bias

    def of(self, avma: int, name: str) -> Mechanism | None:
        """The mechanism of function ``name`` at ``avma`` (its frame's address, or that of the function an
        inlined ``name`` was expanded from)."""
        if not self.low <= avma < self.high:
            return None
        return FUNCTIONS.get(name.partition(".")[0])
