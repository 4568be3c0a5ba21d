"""The interpreter's own native functions, as address ranges: eval-loop anchors, call glue, GIL waits.

Computed once per session from the interpreter's symbol table (``.symtab``, or the separate debug file's
when the binary has only ``.dynsym``, as Debian's static python3 does; ``ObjectFile.symbols`` picks it).
GCC splits hot functions into parts named ``<name>.cold``, ``.part.N``, ``.constprop.N``, ``.isra.N`` and
(LTO) ``.lto_priv.N``; a part belongs to the function it was split from, so names match on the part before
the first dot. ``.dynsym`` alone has no split parts and no static functions (``take_gil``): the ranges are then
just smaller, never wrong.

* **Anchors**: ``_PyEval_EvalFrameDefault`` only (reference section 4.3): ``PyEval_EvalFrame``/``...Ex``
  are thin wrappers in 3.8+ and would be counted twice.
* **Interpreter frames** (``--hide-interpreter``): the eval loop and the call path between it and a C
  function, after pystack's IGNORE list and py-spy's drop rule (reference sections 4.1, 4.2): anything with
  "vectorcall" in its name, and the named call helpers below.
* **GIL waits**: ``take_gil`` (pystack: it on the stack means "waiting for the GIL").
"""

from __future__ import annotations

import bisect
import re

from profiler.binary.symbols import SymbolTable
from profiler.model import NativeFrame, UnwindMethod

EVAL_FUNCTIONS = frozenset({"_PyEval_EvalFrameDefault"})
GIL_WAIT_FUNCTIONS = frozenset({"take_gil"})
#: 3.8-3.14 call-path functions (Objects/call.c, Python/ceval.c, Objects/methodobject.c, typeobject.c,
#: descrobject.c, funcobject.c, classobject.c) that only forward a call
CALL_GLUE = frozenset({
    "_PyEval_EvalFrameDefault", "_PyEval_EvalFrame", "PyEval_EvalFrame", "PyEval_EvalFrameEx", "_PyEval_Vector",
    "_PyEval_EvalCode", "_PyEval_EvalCodeWithName", "PyEval_EvalCode", "PyEval_EvalCodeEx",
    "call_function", "do_call_core", "function_code_fastcall", "cfunction_call", "cfunction_call_varargs",
    "_PyObject_MakeTpCall", "PyObject_Call", "_PyObject_Call", "_PyObject_Call_Prepend", "PyObject_CallObject",
    "_PyObject_FastCall", "_PyObject_FastCallDict", "_PyObject_FastCallDictTstate", "_PyObject_FastCallKeywords",
    "_PyFunction_FastCallDict", "_PyFunction_FastCallKeywords", "_PyCFunction_FastCallDict",
    "_PyCFunction_FastCallKeywords", "_PyMethodDef_RawFastCallDict", "_PyMethodDef_RawFastCallKeywords",
    "_PyMethodDescr_FastCallKeywords", "PyVectorcall_Call", "_PyVectorcall_Call", "object_vacall",
    "PyObject_CallFunctionObjArgs", "PyObject_CallMethodObjArgs", "PyObject_CallOneArg", "PyObject_CallNoArgs",
    "slot_tp_call", "type_call", "wrapper_call", "methoddescr_call", "method_call", "func_call",
})
CALL_GLUE_SUBSTRINGS = ("vectorcall", "Vectorcall", "_TAIL_CALL_")
_CALL_GLUE_SUBSTRING = re.compile("|".join(CALL_GLUE_SUBSTRINGS))

#: what each name of interest is: (eval loop, GIL wait, call glue); one dict lookup per symbol
_KINDS = {name: (name in EVAL_FUNCTIONS, name in GIL_WAIT_FUNCTIONS, name in CALL_GLUE)
          for name in EVAL_FUNCTIONS | GIL_WAIT_FUNCTIONS | CALL_GLUE}  # fmt: skip
_OTHER = (False, False, False)


#: functions at the base of a coroutine's own C stack, where a switch into it first ran it: greenlet's
#: ``g_initialstub`` (greenlet 1-2, C; ``greenlet::UserGreenlet::g_initialstub`` in 3, mangled
#: ``_ZN8greenlet12UserGreenlet13g_initialstubEPv``, exported). gevent and eventlet run on greenlet. The eval
#: loops outward of it run the greenlet that switched, whose frames are not in the running one's chain.
COROUTINE_STACK_BASES = ("g_initialstub",)


def is_coroutine_base(name: str) -> bool:
    """A (mangled or plain) function name of ``COROUTINE_STACK_BASES``."""
    return any(base in name for base in COROUTINE_STACK_BASES)


def is_call_glue(name: str) -> bool:
    """A call-path function by name (an inlined copy, named by DWARF, or a split part such as ``.cold``)."""
    base = name.partition(".")[0]
    return base in CALL_GLUE or _CALL_GLUE_SUBSTRING.search(base) is not None


class AddressRanges:
    """Sorted, non-overlapping ``[start, end)`` ranges with a bisect lookup."""

    __slots__ = ("starts", "ends")

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        ranges.sort()
        self.starts = [start for start, _ in ranges]
        self.ends = [end for _, end in ranges]

    def __contains__(self, addr: int) -> bool:
        i = bisect.bisect_right(self.starts, addr) - 1
        return i >= 0 and addr < self.ends[i]

    def __len__(self) -> int:
        return len(self.starts)


class InterpreterFunctions:
    """Address ranges (avma) of the interpreter's eval loop, call glue and GIL wait functions."""

    def __init__(self, symbols: SymbolTable | None, bias: int) -> None:
        evals: list[tuple[int, int]] = []
        glue: list[tuple[int, int]] = []
        gil: list[tuple[int, int]] = []
        self.source = symbols.source if symbols is not None else "none"
        #: every function is named, split parts (``.cold``) and static ones included: a full ``.symtab`` (the
        #: file's or a debug file's), or ``.dynsym`` with MiniDebugInfo's functions; not ``.dynsym`` alone
        self.complete = self.source.endswith(".symtab") or self.source.startswith(".dynsym+")
        if symbols is not None:
            names = symbols.function_names()
            starts, ends = symbols.addrs.tolist(), symbols.ends.tolist()
            # one pass over ~6-10k functions at attach, before the first Python frame can be placed: kept to
            # a dict lookup and a regex search per name (6-20 ms -> 2-5 ms here)
            kinds, glue_substring = _KINDS, _CALL_GLUE_SUBSTRING.search
            for name, start, end in zip(names, starts, ends):
                base = name.partition(".")[0]  # a split part ("<name>.cold") belongs to its function
                is_eval, is_gil_wait, is_glue = kinds.get(base, _OTHER)
                is_glue = is_glue or glue_substring(base) is not None
                if not (is_eval or is_gil_wait or is_glue):
                    continue
                span = (start + bias, end + bias)
                if is_eval:
                    evals.append(span)
                if is_gil_wait:
                    gil.append(span)
                if is_glue:
                    glue.append(span)
        self.eval = AddressRanges(evals)
        self.glue = AddressRanges(glue)
        self.gil_wait = AddressRanges(gil)

    @staticmethod
    def _pc(frame: NativeFrame) -> int:
        """The address inside the frame's function: a caller's return address may be the first byte after
        a function that ends with a call, so callers are looked up one byte earlier."""
        if frame.method is UnwindMethod.IP or frame.method is UnwindMethod.SIGNAL:
            return frame.avma
        return frame.avma - 1

    def is_anchor(self, frame: NativeFrame) -> bool:
        return self._pc(frame) in self.eval

    def is_interpreter_frame(self, frame: NativeFrame) -> bool:
        return self._pc(frame) in self.glue

    def is_gil_wait(self, frame: NativeFrame) -> bool:
        return self._pc(frame) in self.gil_wait
