"""``streams-eos describe FILE``: print a topology file's topology and how its records run.

FILE is a topology file as for ``streams-eos run`` (see :mod:`streams.cli.run`); nothing
runs: the topology is printed in Kafka's ``TopologyDescription`` format, then which of its
sources and nodes take batches and which take one record at a time.
"""

from __future__ import annotations

import argparse
from typing import Any

from runtime.app.topology_file import build_config, build_topology_of, load_topology_file
from streams.cli import COMMANDS
from topology.engine.processing import describe_processing


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``describe`` subcommand."""
    desc = sub.add_parser(
        "describe",
        parents=[common],
        help=COMMANDS["describe"][1],
        description=(
            "Print FILE's topology in Kafka's TopologyDescription format, then how its "
            "records run under FILE's CONFIG: which sources and nodes take batches "
            "(processing.engine=columnar) and which take one record at a time."
        ),
    )
    desc.add_argument("file", metavar="FILE")
    desc.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration key (repeatable); wins over FILE's CONFIG",
    )
    desc.set_defaults(handler=_describe, needs_root=False)


def _describe(args: argparse.Namespace) -> int:
    module = load_topology_file(args.file)
    topology = build_topology_of(module, args.file)
    print(topology.describe(), end="")
    config = build_config(module, root="memory://describe", properties=None, overrides=args.config)
    print(describe_processing(topology, config), end="")
    return 0
