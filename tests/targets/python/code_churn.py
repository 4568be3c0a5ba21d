"""Target: keeps creating, running and freeing functions, so code objects are reborn at recycled addresses.

argv[1]: file descriptor to write "ready\n" to once the churn runs.
Each round makes a function ``f_<round>_line_<L>`` whose code says it starts on line L of a file named
``<churn-<round>>``, runs it for about half a millisecond and drops it. The name encodes where the function
is, so a test can check that a frame's name, file and line always belong together.

Most rounds build the code object with ``CodeType.replace`` from one template: right after the previous
function is freed, almost nothing else is allocated before the new code object, so it lands at the address
the old one had (the allocator hands the freed block out again). Every fourth round compiles fresh source
instead, as real ``exec`` loops do.
"""

import os
import sys
import time
import types

SOURCE = """def {name}(deadline, clock):
    while clock() < deadline:
        pass
"""


def template():
    namespace = {}
    exec(compile(SOURCE.format(name="template"), "<template>", "exec"), namespace)
    return namespace["template"].__code__


def make(code, rnd, line):
    name = f"f_{rnd}_line_{line}"
    if rnd % 4 == 0:
        namespace = {}
        exec(compile("\n" * (line - 1) + SOURCE.format(name=name), f"<churn-{rnd}>", "exec"), namespace)
        return namespace[name]
    names = {"co_name": name, "co_filename": f"<churn-{rnd}>", "co_firstlineno": line}
    if sys.version_info >= (3, 11):
        names["co_qualname"] = name
    return types.FunctionType(code.replace(**names), {})


def churn(ready_fd):
    code = template()
    rnd = 0
    while True:
        function = make(code, rnd, 1 + (rnd * 7) % 400)
        function(time.perf_counter() + 0.0005, time.perf_counter)  # at:call
        del function
        rnd += 1
        if ready_fd is not None and rnd >= 8:
            os.write(ready_fd, b"ready\n")
            ready_fd = None


if __name__ == "__main__":
    churn(int(sys.argv[1]))
