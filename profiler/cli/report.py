"""``nprof report SESSION -o OUT``: render a saved session in any format, without re-sampling."""

from __future__ import annotations

import argparse
import sys

from profiler.atomic import STDOUT, check_writable, output_label
from profiler.cli.engine import load_engine
from profiler.cli.frame_options import add_frame_arguments
from profiler.config import ExportConfig
from profiler.errors import SessionFormatError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="a .nprof file written by `nprof record`")
    p.add_argument("-o", "--output", help="output file; the format follows the extension; - for standard output")
    p.add_argument("-f", "--format", help="output format: speedscope, folded or nprof (without -o: to standard "
                   "output; with neither, only the table of top functions is shown)")
    p.add_argument("--idle", action="store_true",
                   help="include samples of idle and blocked threads, and of threads waiting for the GIL")
    p.add_argument("--threads", action="store_true", help="keep threads apart in folded output")
    p.add_argument("--gil", action="store_true", help="keep only samples of the thread holding the GIL")
    p.add_argument("--hide-interpreter", action="store_true", help="hide the interpreter's own frames")
    add_frame_arguments(p)


def run(args: argparse.Namespace) -> int:
    load_engine("profiler.cli.status")  # (numpy first: ``engine.py``)
    from profiler.cli.status import top_table
    from profiler.export.base import infer_format, write
    from profiler.profile.session import Session

    config = ExportConfig(idle=args.idle, threads=args.threads, gil_only=args.gil,
                          hide_interpreter=args.hide_interpreter, lines=args.lines)  # fmt: skip
    # -f without -o: the output goes to standard output (``nprof report s.nprof -f folded | flamegraph.pl``)
    output = STDOUT if args.output is None and args.format is not None else args.output
    exporter = None
    if output is not None:
        exporter = infer_format(output, args.format)
        check_writable(output)
    session = Session.load(args.session)
    if session.frame_info is None:
        raise SessionFormatError(f"{args.session}: the session holds no symbol names (it was not finished).")
    if config.idle and not session.meta.idle_stacks:
        print("nprof: this session was recorded without --idle: an idle sample shows the stack its thread had "
              "when last seen running, not where it sleeps (record with --idle for those)", file=sys.stderr)
    if output is None or exporter is None:
        print(top_table(session, config))  # the table is the output
        return 0
    write(session, output, exporter, config)
    print(f"nprof: wrote {exporter.format} to {output_label(output)}", file=sys.stderr)  # (stdout: the profile's)
    print(top_table(session, config), file=sys.stderr)
    return 0
