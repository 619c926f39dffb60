"""``streams-eos crashtest FILE``: run a topology under SIGKILLs and check it exactly once.

::

    streams-eos crashtest examples/wordcount.py --generate 200 --kills 5 --report r.json
    streams-eos crashtest app.py --input orders=orders.jsonl --kills 20 --seed 7
    streams-eos crashtest examples/wordcount.py --generate 400 --poison 0.02

Prints the report (kills and where they hit, restarts, recovery p50/max, records in and
out, duplicates, losses, store and transaction checks, the first mismatches) and exits 0
only when exactly-once held. See :mod:`streams.crash.harness`.
"""

from __future__ import annotations

import argparse
from typing import Any

from common.errors import ConfigError
from streams.cli import COMMANDS
from streams.cli.progress import ProgressBar
from streams.crash.harness import crashtest
from streams.crash.plan import GUARANTEES, KILL_KINDS, RunRecord


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``crashtest`` subcommand."""
    p = sub.add_parser(
        "crashtest",
        parents=[common],
        help=COMMANDS["crashtest"][1],
        description=(
            "Run FILE as a separate process on local Spark, SIGKILL it N times (at random "
            "moments, at commits and at the fault points of the commit protocol), restart "
            "it after each kill, then compare outputs and stores with the TopologyTestDriver"
            "'s reference. Exit code 0 only when exactly-once held."
        ),
    )
    p.add_argument("file", metavar="FILE", help="a Python file defining build_topology()")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="TOPIC=PATH.jsonl",
        help="records to produce first: one JSON object per line with key, value, "
        "optional timestamp and headers (repeatable)",
    )
    p.add_argument("--generate", type=int, metavar="N", help="use FILE's generate(N) as input")
    p.add_argument("--kills", type=int, default=5, metavar="N", help="kills (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill plan (default 0)")
    p.add_argument("--guarantee", choices=GUARANTEES, default="exactly_once_v2")
    p.add_argument(
        "--kind",
        action="append",
        choices=KILL_KINDS,
        help="only these kinds of kill (repeatable; default: every kind allowed)",
    )
    p.add_argument(
        "--point", action="append", metavar="POINT", help="only these fault points (repeatable)"
    )
    p.add_argument(
        "--lose-checkpoint",
        action="store_true",
        help="delete Spark's checkpoint before every restart",
    )
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="for every run"
    )
    p.add_argument(
        "--poison",
        type=float,
        default=0.0,
        metavar="RATE",
        help="make this fraction of the input poison (a value no deserializer accepts) and "
        "check each lands in the dead-letter topic once (default 0)",
    )
    p.add_argument("--workdir", metavar="DIR", help="root, state and logs (default: new tmp)")
    p.add_argument("--report", metavar="PATH", help="also write the report as JSON")
    p.set_defaults(handler=run, needs_root=False, creates_root=True)


def run(args: argparse.Namespace) -> int:
    """Run the crash test; print the report; return 0 only when exactly-once held."""
    inputs: dict[str, str] = {}
    for spec in args.input:
        topic, sep, path = spec.partition("=")
        if not sep or not topic or not path:
            raise ConfigError(f"--input {spec!r}: expected TOPIC=PATH.jsonl")
        inputs[topic] = path
    config: dict[str, object] = {}
    for pair in args.config:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config {pair!r}: expected KEY=VALUE")
        config[key.strip()] = value.strip()
    bar = ProgressBar(f"crash test: {args.kills} kills, then a run to the end", args.kills + 1)
    killed = 0

    def on_run(record: RunRecord) -> None:
        nonlocal killed
        killed += record.killed
        bar.what = f"crash test: run {record.run} {'killed' if record.killed else 'ended'}"
        bar.update(1 if record.killed or record.error is None else 0)

    report = crashtest(
        args.file,
        inputs=inputs,
        generate=args.generate,
        kills=args.kills,
        seed=args.seed,
        guarantee=args.guarantee,
        workdir=args.workdir,
        config=config,
        points=args.point,
        kinds=args.kind,
        lose_checkpoint=args.lose_checkpoint,
        report=args.report,
        on_run=on_run,
        poison=args.poison,
    )
    bar.close()
    print(report.text())
    return report.exit_code
