# The nprof image: nprof plus what it needs to profile processes in its container or, with
# `--pid host`, on the host. Run it with the capability ptrace needs, and the one that lets its sampling
# thread wake at real-time priority (without it, threads sharing its CPU are sampled where they block):
#   docker run --rm --cap-add SYS_PTRACE --cap-add SYS_NICE --pid host -v "$PWD:/out" nprof record --pid 1234 -o /out/p.speedscope.json
# The base image is a build argument because image registries may be unreachable where it is built; any
# Debian bookworm image with Python >= 3.10 works (e.g. python:3.11-slim-bookworm, or a local import).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# libc6-dbg: names of glibc's internal functions; gcc: only for `nprof demo`.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libc6-dbg gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY profiler ./profiler
COPY agents ./agents
RUN python3 -m pip install --no-cache-dir . && rm -rf /src

WORKDIR /out
ENTRYPOINT ["nprof"]
CMD ["--help"]
