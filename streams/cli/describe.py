"""``streams-eos describe FILE``: print a topology file's topology and how its records run.

FILE is a topology file as for ``streams-eos run`` (see :mod:`streams.cli.run`); nothing
runs: the topology is printed in Kafka's ``TopologyDescription`` format, then which of its
sources and nodes take batches and which take one record at a time. ``--format
mermaid|dot|svg`` draws it instead (:mod:`topology.graph.picture`): sub-topologies,
sources, processors, stores, sinks and the topics between them, the columnar nodes green.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from runtime.app.topology_file import build_config, build_topology_of, load_topology_file
from streams.cli import COMMANDS
from topology.engine.processing import describe_processing
from topology.graph.picture import picture, to_dot, to_mermaid
from topology.graph.picture_svg import to_svg

#: The formats of ``--format``.
FORMATS = ("text", "mermaid", "dot", "svg")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``describe`` subcommand."""
    desc = sub.add_parser(
        "describe",
        parents=[common],
        help=COMMANDS["describe"][1],
        description=(
            "Print FILE's topology in Kafka's TopologyDescription format, then how its "
            "records run under FILE's CONFIG: which sources and nodes take batches "
            "(processing.engine=columnar) and which take one record at a time. "
            "--format mermaid, dot or svg draws it instead."
        ),
    )
    desc.add_argument(
        "file", metavar="FILE", help="a topology file (a Python file defining build_topology())"
    )
    desc.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (Kafka's TopologyDescription, the default), or a picture: mermaid "
        "(GitHub, GitLab and MkDocs draw it), dot (Graphviz) or svg (an image, drawn here)",
    )
    desc.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration key (repeatable); wins over FILE's CONFIG",
    )
    desc.set_defaults(handler=_describe, needs_root=False)


def _describe(args: argparse.Namespace) -> int:
    print(describe_file(args.file, args.format, args.config), end="")
    return 0


def describe_file(path: str, fmt: str = "text", overrides: Sequence[str] = ()) -> str:
    """The description of the topology file at ``path`` in ``fmt`` (one of
    :data:`FORMATS`), under its CONFIG and ``overrides`` (``KEY=VALUE``)."""
    module = load_topology_file(path)
    topology = build_topology_of(module, path)
    config = build_config(module, root="memory://describe", properties=None, overrides=overrides)
    processing = describe_processing(topology, config)
    if fmt == "text":
        return f"{topology.describe()}{processing}"
    batched = processing.columnar_nodes() | {s.source for s in processing.sources if s.columnar}
    drawn = picture(topology, batched)
    if fmt == "svg":
        return to_svg(drawn, title=config.application_id)
    return (to_mermaid if fmt == "mermaid" else to_dot)(drawn)
