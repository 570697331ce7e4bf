"""``logbus acls``: add, remove and list ACLs (the shape of kafka-acls.sh). Not implemented yet (issue 18 item 2)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int:
    print("logbus: acls: not implemented yet", file=sys.stderr)
    return 2
