#!/usr/bin/env bash
# The benchmarks' own environment: peers installed from the Python package index (py-spy; austin-dist 3.7,
# since austin 4.0 needs a newer glibc than Debian 12's), apart from nprof's.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/py-spy ] || { python3 -m venv .venv && .venv/bin/pip install -q py-spy "austin-dist==3.7.*"; }
echo "benchmarks/.venv: $(.venv/bin/py-spy --version), $(.venv/bin/austin --version 2>&1 | head -1)"
