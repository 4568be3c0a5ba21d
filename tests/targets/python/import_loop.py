"""Target: a program whose time goes to importing: it writes 50 small modules to a temporary directory and
imports them again and again, each time after forgetting them (``sys.modules``), so that every import
finds, reads and unmarshals its module; the modules' own code is one assignment.

argv[1]: file descriptor to write "ready\n" to once the loop runs.
"""

import importlib
import os
import sys
import tempfile

MODULES = 50


def write_modules(directory):
    for i in range(MODULES):
        with open(os.path.join(directory, f"nprof_imported_{i}.py"), "w") as f:
            f.write(f"VALUE = {i}\n")


def import_forever(ready_fd):
    names = [f"nprof_imported_{i}" for i in range(MODULES)]
    while True:
        for name in names:
            sys.modules.pop(name, None)
            importlib.import_module(name)  # at:import
        if ready_fd is not None:
            os.write(ready_fd, b"ready\n")
            ready_fd = None


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        write_modules(directory)
        sys.path.insert(0, directory)
        import_forever(int(sys.argv[1]))
