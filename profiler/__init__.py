"""nprof: a sampling, cross-language profiler for Linux processes.

The engine lives in this package; managed-runtime agents live in the sibling ``agents`` package.
``../shared/DESIGN.md`` (and ``docs/architecture.md``) describe how a sample flows through the rooms.
"""

__version__ = "0.1.0"
