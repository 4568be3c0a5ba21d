"""The ``nprof`` command: argument parsing, dispatch, and the boundary where errors become help text.

Every ``NprofError`` is printed as one paragraph with its exit code; a traceback is only ever shown for a
bug (and then with a request to report it). Nothing here imports the engine: each command does, once its
arguments and its target were checked (``engine.py``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from profiler import __version__
from profiler.cli import dump, record, report
from profiler.errors import NprofError

if TYPE_CHECKING:
    from profiler.binary.objfile import ObjectFileCache
    from profiler.runtime import Agent


def default_agents(objects: ObjectFileCache) -> list[Agent]:
    """The managed-runtime agents wired in by default (the engine itself never imports one); they share
    the engine's parsed ELF files."""
    from agents.cpython import CPythonAgent

    agents: list[Agent] = [CPythonAgent(objects)]
    return agents


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nprof",
        description="Sampling profiler for Linux processes: native and managed (CPython) stacks via ptrace.",
    )
    parser.add_argument("--version", action="version", version=f"nprof {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser(
        "record",
        help="sample a running process (--pid) or a command (-- CMD) and write a profile",
        description="Sample a process and write a profile. Examples: `nprof record --pid 1234 -d 10`, "
        "`nprof record -o out.speedscope.json -- ./app --flag`.",
    )
    record.add_arguments(p)
    p = sub.add_parser("dump", help="print every thread's current stack (Python and native), now")
    dump.add_arguments(p)
    p = sub.add_parser("report", help="render a saved .nprof session in another format")
    report.add_arguments(p)
    p = sub.add_parser("demo", help="build and record the bundled demo program")
    p.add_argument("-o", "--output", default="nprof-demo.speedscope.json", help="output file")
    p.add_argument("-d", "--duration", type=float, default=3.0, help="seconds the demo runs (default 3)")
    return parser


def run_demo(args: argparse.Namespace) -> int:
    from profiler.cli.engine import load_engine

    record.check_duration(args.duration, "Try -d 3.")  # (the demo program's own argument, not record's -d)
    binary = load_engine("profiler.demo").build_demo()
    argv = ["record", "-o", args.output, "--", binary, str(args.duration)]
    return main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.subcommand == "record":
            return record.run(args, default_agents)
        if args.subcommand == "dump":
            return dump.run(args, default_agents)
        if args.subcommand == "report":
            return report.run(args)
        if args.subcommand == "demo":
            return run_demo(args)
    except NprofError as e:
        print(f"nprof: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        print(f"nprof: {str(e) or 'interrupted'}", file=sys.stderr)
        return 128 + getattr(e, "signal", signal.SIGINT)  # SetupInterrupted: SIGINT's or SIGTERM's
    except BrokenPipeError:
        # Whoever read the output left (`nprof dump --pid P | head`): end as a shell tool ends on SIGPIPE,
        # quietly. Output files were written before anything is printed. Python flushes stdout again at
        # exit, so it is pointed at /dev/null first (the Python docs' note on SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception:
        traceback.print_exc()
        print(
            f"nprof {__version__}: internal error (a bug). Please report it with the traceback above.",
            file=sys.stderr,
        )
        return 70
    parser.error(f"unknown command {args.subcommand}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
