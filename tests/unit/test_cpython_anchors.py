"""The interpreter's own functions as address ranges (``agents/cpython/anchors.py``): split parts belong to
the function they were split from, and the call glue is matched by name and by substring."""

from __future__ import annotations

import numpy as np

from agents.cpython.anchors import InterpreterFunctions


class Symbols:
    """The three things InterpreterFunctions reads of a SymbolTable."""

    source = ".symtab"

    def __init__(self, functions: list[tuple[str, int, int]]) -> None:
        self._names = [name for name, _, _ in functions]
        self.addrs = np.array([start for _, start, _ in functions], dtype=np.uint64)
        self.ends = np.array([end for _, _, end in functions], dtype=np.uint64)

    def function_names(self) -> list[str]:
        return self._names


def test_split_parts_substrings_and_exact_names() -> None:
    symbols = Symbols([
        ("_PyEval_EvalFrameDefault", 0x1000, 0x9000),
        ("_PyEval_EvalFrameDefault.cold", 0x20000, 0x20400),  # GCC's cold part: the same function
        ("take_gil", 0x9000, 0x9200),
        ("take_gil.part.0", 0x9200, 0x9300),
        ("_PyObject_VectorcallTstate.lto_priv.0", 0x9300, 0x9400),  # by substring
        ("method_vectorcall_O", 0x9400, 0x9500),
        ("cfunction_call", 0x9500, 0x9600),  # by exact name
        ("cfunction_callx", 0x9600, 0x9700),  # neither
        ("list_sort", 0x9700, 0x9800),
        ("x.vectorcall", 0x9800, 0x9900),  # the substring after the first dot is not the function's name
    ])  # fmt: skip
    functions = InterpreterFunctions(symbols, bias=0x100000)  # type: ignore[arg-type]
    assert list(zip(functions.eval.starts, functions.eval.ends)) == [(0x101000, 0x109000), (0x120000, 0x120400)]
    assert list(zip(functions.gil_wait.starts, functions.gil_wait.ends)) == [(0x109000, 0x109200),
                                                                             (0x109200, 0x109300)]  # fmt: skip
    assert functions.glue.starts == [0x101000, 0x109300, 0x109400, 0x109500, 0x120000]


def test_no_symbols_gives_empty_ranges() -> None:
    functions = InterpreterFunctions(None, bias=0)
    assert functions.source == "none" and len(functions.eval) == len(functions.glue) == 0
