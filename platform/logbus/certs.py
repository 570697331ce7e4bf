"""``logbus certs``: a private CA and the certificates of a secure topology. Not implemented yet (issue 18 item 5)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int:
    print("logbus: certs: not implemented yet", file=sys.stderr)
    return 2
