#!/usr/bin/env bash
# Install everything nprof's test suite needs, idempotently, from the project's own files:
#   - Debian packages: Chromium (the real speedscope viewer), gdb (ground truth for native stacks),
#     python3-dbg / python3.11-dbg (symbols of Debian's /usr/bin/python3), gcc/g++ (test targets);
#   - nprof itself with its test extras (pytest and pytest-xdist, jsonschema, playwright's Python driver);
#   - npm's speedscope package (viewer + JSON schema), pinned, into .test-deps/;
#   - a Debian sid root with CPython 3.14 and 3.13 and their debug packages (debootstrap, ~40-90 s and
#     ~1 GB the first time), cached in $NPROF_TEST_CACHE (default ~/.cache/nprof-tests) for later runs.
# Nothing is downloaded by playwright itself: the tests drive Debian's /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
SPEEDSCOPE_VERSION=1.25.0
APT_PACKAGES=(chromium gdb gcc g++ binutils python3-dbg python3.11-dbg debootstrap)

log() { printf '[setup-tests] %s\n' "$*"; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    log "Debian packages present"
fi

if ! "$PYTHON" -c 'import profiler, pytest, xdist, jsonschema, playwright, elftools, capstone, ptrace, numpy, orjson, cxxfilt, mypy, ruff' 2>/dev/null \
    || [ "$("$PYTHON" -m mypy --version 2>/dev/null | cut -d' ' -f2)" != "2.4.1" ] \
    || [ "$("$PYTHON" -m ruff --version 2>/dev/null | cut -d' ' -f2)" != "0.17.6" ] \
    || [ "$("$PYTHON" -I -c 'import profiler, os; print(os.path.dirname(os.path.dirname(profiler.__file__)))' 2>/dev/null)" != "$PWD" ]; then
    log "installing nprof and its test extras into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
    "$PYTHON" -m pip install -q --disable-pip-version-check -e ".[test]"
else
    log "nprof and test extras present"
fi

if [ ! -f ".test-deps/node_modules/speedscope/dist/release/index.html" ] \
    || ! grep -q "speedscope@${SPEEDSCOPE_VERSION}" .test-deps/node_modules/speedscope/dist/release/release.txt 2>/dev/null; then
    log "installing speedscope@${SPEEDSCOPE_VERSION} from npm into .test-deps/"
    mkdir -p .test-deps
    npm install --silent --no-audit --no-fund --prefix .test-deps "speedscope@${SPEEDSCOPE_VERSION}" >/dev/null
else
    log "speedscope viewer present"
fi
# nprof's modules compiled once: each test starts nprof hundreds of times, and where PYTHONDONTWRITEBYTECODE is
# set (as on this project's machines) every start compiled them again, ~0.12 s each
"$PYTHON" -m compileall -q profiler agents >/dev/null

# Debian sid's interpreters, run in their own root by the tests (tests/targets/python/interpreters.py): the
# packages are sid's binary ones (its source packages are not reachable here). A root is complete once its
# stamp names the package list; anything else is built again, into a fresh directory first.
SID_PACKAGES=python3.14,python3.14-dbg,libpython3.14-dbg,python3.13,python3.13-dbg,libpython3.13-dbg,libc6-dbg,binutils
SID_ROOT="${NPROF_TEST_CACHE:-$HOME/.cache/nprof-tests}/sid"
if [ "$(cat "$SID_ROOT/.nprof-packages" 2>/dev/null)" != "$SID_PACKAGES" ]; then
    log "making a Debian sid root with CPython 3.14 and 3.13 in $SID_ROOT (debootstrap)"
    rm -rf "$SID_ROOT.new" "$SID_ROOT"
    mkdir -p "$(dirname "$SID_ROOT")"
    debootstrap --variant=minbase --include="$SID_PACKAGES" sid "$SID_ROOT.new" http://deb.debian.org/debian \
        > "$SID_ROOT.log" 2>&1 || { tail -20 "$SID_ROOT.log"; exit 1; }
    rm -rf "$SID_ROOT.new/var/cache/apt/archives/"*.deb
    echo "$SID_PACKAGES" > "$SID_ROOT.new/.nprof-packages"
    mv "$SID_ROOT.new" "$SID_ROOT"
else
    log "Debian sid root present ($SID_ROOT)"
fi
log "ready"
