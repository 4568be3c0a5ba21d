"""The ``nprof`` command line: its parser and each command's checks import nothing heavy; a command imports
the engine once they pass (``engine.py``)."""
