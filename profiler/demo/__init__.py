"""The bundled demo program: C source shipped with nprof, compiled on first use into the cache directory."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources

from profiler.binary.cache import default_cache_dir
from profiler.errors import NprofError

#: frame pointers and debug info, so the demo's stacks are exact with or without DWARF CFI support
CFLAGS = ("-O2", "-g", "-fno-omit-frame-pointer")


def build_demo() -> str:
    """Path of the compiled demo, building it if this version of the source has not been built yet."""
    source = resources.files(__package__).joinpath("nprof_demo.c").read_bytes()
    digest = hashlib.sha256(source + " ".join(CFLAGS).encode()).hexdigest()[:16]
    out_dir = os.path.join(default_cache_dir(), "demo", digest)
    binary = os.path.join(out_dir, "nprof-demo")
    if os.path.exists(binary):
        return binary
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise NprofError("The demo needs a C compiler and none was found.", "Install gcc (`apt-get install gcc`).")
    os.makedirs(out_dir, exist_ok=True)
    src_path = os.path.join(out_dir, "nprof_demo.c")
    with open(src_path, "wb") as f:
        f.write(source)
    tmp = f"{binary}.{os.getpid()}.tmp"
    result = subprocess.run([compiler, *CFLAGS, "-o", tmp, src_path], capture_output=True, text=True)
    if result.returncode != 0:
        raise NprofError(f"Building the demo failed:\n{result.stderr.strip()}")
    os.replace(tmp, binary)
    return binary
