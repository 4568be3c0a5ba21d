"""Target: the main thread alternates ~50 ms of ``main_hot`` with a ~50 ms call of ``sub_hot`` in a
subinterpreter it created once (``_xxsubinterpreters.run_string``, 3.12: the call runs on the state that
``create`` bound to the main thread, empty between calls).

argv[1]: file descriptor to write "ready\n" to after the first round. Runs until killed.
Exits with status 3 when the interpreter has no ``_xxsubinterpreters.run_string``.
"""

import os
import sys
import time

try:
    import _xxsubinterpreters as interpreters

    interpreters.run_string  # noqa: B018 (3.13 renamed the module and the call)
except (ImportError, AttributeError):
    sys.exit(3)

SUB_CODE = """
import time
def sub_hot():
    x = 1
    for _ in range(2000):
        x = (x * 1103515245 + 12345) % 2147483648
end = time.monotonic() + 0.05
while time.monotonic() < end:
    sub_hot()
"""


def main_hot():
    x = 1
    for _ in range(2000):
        x = (x * 1103515245 + 12345) % 2147483648


def main(ready_fd):
    sub = interpreters.create()
    ready = False
    while True:
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            main_hot()
        interpreters.run_string(sub, SUB_CODE)
        if not ready:
            os.write(ready_fd, b"ready\n")
            ready = True


if __name__ == "__main__":
    main(int(sys.argv[1]))
