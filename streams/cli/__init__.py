"""The ``streams-eos`` command line: Kafka's tools, over topics stored as Delta tables.

Every subcommand takes ``--root`` (default: the ``STREAMS_ROOT`` environment variable) and
``--verbose``. An error prints one line saying what is wrong and what to do, and exits
non-zero; ``--verbose`` adds the stack trace.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from common.errors import StreamsError
from streams.cli import (
    app_reset,
    console,
    crashtest,
    groups,
    offsets,
    run,
    state,
    status,
    topics,
    transactions,
)

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming what to fix (argparse's own
    print the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed version of the project."""
    try:
        return importlib.metadata.version("spark-streams-eos")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "unknown (not installed)"


def _common() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--root",
        default=os.environ.get("STREAMS_ROOT"),
        help="storage root of the topics: a path or URI (default: $STREAMS_ROOT)",
    )
    common.add_argument("--verbose", action="store_true", help="log more; show stack traces")
    return common


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``streams-eos`` with every subcommand."""
    parser = _Parser(
        prog="streams-eos",
        description="Kafka Streams on Spark, exactly once: topic and offset tools.",
    )
    parser.add_argument("--version", action="version", version=f"streams-eos {version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    common = _common()
    topics.register(sub, common)
    offsets.register(sub, common)
    console.register(sub, common)
    transactions.register(sub, common)
    groups.register(sub, common)
    app_reset.register(sub, common)
    run.register(sub, common)
    crashtest.register(sub, common)
    status.register(sub, common)
    state.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``streams-eos`` and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if getattr(args, "needs_root", True) and not args.root:
        parser.exit(
            EXIT_USAGE,
            f"streams-eos {args.command}: error: no storage root; pass --root PATH or set "
            "STREAMS_ROOT\n",
        )
    missing = _missing_root(args)
    if missing is not None:
        print(f"streams-eos {args.command}: error: {missing}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): not an error of ours.
        sys.stderr.close()
        return 0
    except StreamsError as exc:
        return _fail(args, exc, f"error: {exc}")
    except Exception as exc:
        return _fail(
            args,
            exc,
            f"error: unexpected {type(exc).__name__}: {exc} (run again with --verbose for "
            "the stack trace, and report it if it persists)",
        )
    return code


def _missing_root(args: argparse.Namespace) -> str | None:
    """Why a local storage root that does not exist cannot be used (None: it can): only
    the commands that create topics create it."""
    root = getattr(args, "root", None)
    if not getattr(args, "needs_root", True):  # describe, run, crashtest: their own
        return None
    if not root or ("://" in root and not root.startswith("file://")):
        return None
    path = root.removeprefix("file://")
    creates = getattr(args, "creates_root", False) or getattr(args, "create", False)
    if creates or os.path.exists(path):
        return None
    source = "STREAMS_ROOT" if root == os.environ.get("STREAMS_ROOT") else "--root"
    return (
        f"the storage root {root} ({source}) does not exist; check the path, or create "
        "topics there first (streams-eos topics --create)"
    )


def _fail(args: argparse.Namespace, exc: BaseException, line: str) -> int:
    if args.verbose:
        traceback.print_exception(exc, file=sys.stderr)
    print(line, file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
