"""The ``streams-eos`` command line: Kafka's tools, over topics stored as Delta tables.

Every subcommand takes ``--root`` (default: the ``STREAMS_ROOT`` environment variable) and
``--verbose``. An error prints one line saying what is wrong and what to do, and exits
non-zero; ``--verbose`` adds the stack trace.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from common.errors import StreamsError

#: Every subcommand, in the order ``--help`` lists them: its module under ``streams.cli``
#: and its one-line help. A command's module (and what it imports: Delta, Arrow, Spark) is
#: imported only when that command runs, so ``streams-eos topics --list`` does not pay for
#: the imports of ``run``.
COMMANDS: dict[str, tuple[str, str]] = {
    "topics": ("topics", "create, list, describe, alter or delete topics"),
    "get-offsets": (
        "offsets",
        "print offsets of a topic's partitions (latest, earliest, or by time)",
    ),
    "console-produce": ("console", "produce lines from stdin to a topic"),
    "console-consume": ("console", "print a topic's records"),
    "transactions": (
        "transactions",
        "list, describe, find hanging, abort or sweep transactions",
    ),
    "groups": ("groups", "list, describe, reset offsets of, or delete consumer groups"),
    "application-reset": (
        "app_reset",
        "reset a Streams application so that it reprocesses its input",
    ),
    "run": ("run", "run a topology file on Spark"),
    "describe": ("describe", "print a topology file's topology"),
    "crashtest": ("crashtest", "run a topology file under random kills and check exactly-once"),
    "status": (
        "status",
        "show an application's instances, threads, tasks, lag, transactions, stores",
    ),
    "state": ("state", "print a store's committed state (interactive query)"),
    "savepoint": ("savepoint", "take, list, describe or delete an application's savepoints"),
    "rewind": ("savepoint", "put a stopped application back to a savepoint, outputs too"),
    "s3-proxy": ("s3proxy", "run a fault-injecting proxy in front of an S3-compatible store"),
    "dlq": ("dlq", "summarize a dead-letter topic, or replay its records after a fix"),
    "doctor": ("doctor", "check a root's topics and logs for damage, and repair it"),
}

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


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Return the argument parser of ``streams-eos``: every subcommand, with the options of
    the one ``argv`` names (all of them without ``argv``: importing every command's module)."""
    parser = _Parser(
        prog="streams-eos",
        description="Kafka Streams on Spark, exactly once: topic and offset tools.",
    )
    parser.add_argument("--version", action="version", version=f"streams-eos {version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    common = _common()
    named = _command_of(argv) if argv is not None else None
    modules = {m for c, (m, _) in COMMANDS.items() if argv is None or c == named}
    registered: set[str] = set()
    for command, (module, summary) in COMMANDS.items():
        if module in modules:
            if module not in registered:  # a module adds all of its commands
                importlib.import_module(f"streams.cli.{module}").register(sub, common)
                registered.add(module)
        else:  # listed by --help; never parsed (argv names another command)
            sub.add_parser(command, help=summary)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (None: none)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``streams-eos`` and return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(  # --verbose: timed lines, to follow a run (a restart, a rebalance)
        level=logging.INFO if args.verbose else logging.WARNING,
        format=("%(asctime)s " if args.verbose else "") + "%(levelname)s %(name)s: %(message)s",
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
