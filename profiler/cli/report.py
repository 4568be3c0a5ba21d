"""``nprof report SESSION -o OUT``: render a saved session in any format, without re-sampling."""

from __future__ import annotations

import argparse
import os

from profiler.atomic import check_writable
from profiler.cli.status import top_table
from profiler.config import ExportConfig
from profiler.errors import SessionFormatError
from profiler.export.base import infer_format, write
from profiler.sampling.session import Session


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="a .nprof file written by `nprof record`")
    p.add_argument("-o", "--output", help="output file; the format follows the extension")
    p.add_argument("-f", "--format", help="output format: speedscope, folded or nprof")
    p.add_argument("--idle", action="store_true", help="include samples of idle and blocked threads")
    p.add_argument("--threads", action="store_true", help="keep threads apart in folded output")
    p.add_argument("--gil", action="store_true", help="keep only samples of the thread holding the GIL")
    p.add_argument("--hide-interpreter", action="store_true", help="hide the interpreter's own frames")


def run(args: argparse.Namespace) -> int:
    config = ExportConfig(
        idle=args.idle, threads=args.threads, gil_only=args.gil, hide_interpreter=args.hide_interpreter
    )
    exporter = None
    if args.output is not None:
        exporter = infer_format(args.output, args.format)
        check_writable(args.output)
    session = Session.load(args.session)
    if session.frame_info is None:
        raise SessionFormatError(f"{args.session}: the session holds no symbol names (it was not finished).")
    if args.output is not None and exporter is not None:
        write(session, args.output, exporter, config)
        print(f"nprof: wrote {exporter.format} to {os.path.abspath(args.output)}")
    print(top_table(session, config))
    return 0
