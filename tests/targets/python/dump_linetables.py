"""Run by the interpreter under test: print every code object's line table and CPython's own answer per
instruction (``PyCode_Addr2Line``, the C function tracebacks use), as JSON, for the decoder tests.

Output: [{"first": co_firstlineno, "table": hex, "units": [offset...], "lines": [line or null...]}]
where offsets are in the unit nprof's RuntimeFrame uses for this version (bytes <= 3.9, code units after).
"""

import ctypes
import json
import sys
import types

SYNTHETIC = '''
def jumps(x):
    a = 1
''' + "\n" * 300 + '''
    b = 2
    if x:
        return a
''' + "\n" * 5 + '''
    return b

def loop(n):
    total = 0
    for i in range(n):
        total += i
    while total > 0:
        total -= 7
    return total

class K:
    def method(self, *args, **kwargs):
        try:
            return sum(args)
        except TypeError:
            return [
                x
                for x in args
            ]
        finally:
            pass

lam = lambda: (yield)
async def coro():
    await coro()
'''


def walk(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk(const)


def main():
    addr2line = ctypes.pythonapi.PyCode_Addr2Line
    addr2line.argtypes = (ctypes.py_object, ctypes.c_int)
    addr2line.restype = ctypes.c_int
    sources = [("<synthetic>", SYNTHETIC)]
    for name in sys.argv[1:]:
        module = __import__(name)
        with open(module.__file__, encoding="utf-8") as f:
            sources.append((module.__file__, f.read()))
    out = []
    for filename, source in sources:
        for code in walk(compile(source, filename, "exec")):
            table = code.co_lnotab if sys.version_info < (3, 10) else code.co_linetable
            step = 1 if sys.version_info < (3, 10) else 2  # f_lasti bytes before 3.10, code units after
            units = list(range(-1, len(code.co_code) // step + 2))
            lines = []
            for unit in units:
                line = addr2line(code, unit * step) if unit >= 0 else code.co_firstlineno
                lines.append(None if line < 0 else line)
            out.append({"first": code.co_firstlineno, "table": table.hex(), "units": units, "lines": lines})
    json.dump(out, sys.stdout)


main()
