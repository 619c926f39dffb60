"""``streams-eos crashtest FILE``: run a topology under faults and check it exactly once.

::

    streams-eos crashtest examples/wordcount.py --generate 200 --kills 5 --report r.json
    streams-eos crashtest app.py --input orders=orders.jsonl --kills 20 --seed 7
    streams-eos crashtest examples/wordcount.py --generate 400 --poison 0.02
    streams-eos crashtest examples/wordcount.py --generate 4000 --kind pause --kills 3
    streams-eos crashtest examples/wordcount.py --generate 40000 --faults all \
        --master 'local-cluster[2,1,1024]' --object-store --duration 3600

With kills only (``--kind fault|random|commit``), one instance runs at a time, killed and
restarted (:mod:`streams.crash.harness`). The other faults (``--kind pause|disk-full|
executor|...``, ``--faults PLAN``, ``--storage-faults RATE``, ``--instances N``) make it a
campaign: several instances at once, the faults mixed, every recovery timed
(:mod:`streams.crash.campaign`). Prints the report and exits 0 only when exactly-once held
(and, in a campaign, every fault was recovered from within 60 s).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from common.errors import ConfigError
from streams.cli import COMMANDS
from streams.cli.progress import ProgressBar
from streams.crash.campaign import Campaign
from streams.crash.campaign_report import FaultEvent, kinds_of
from streams.crash.harness import crashtest
from streams.crash.inputs import InputRecord, load_jsonl
from streams.crash.nemesis import FAULT_KINDS
from streams.crash.plan import GUARANTEES, KILL_KINDS, RunRecord

#: What the kill kinds are in a campaign.
_AS_CAMPAIGN = {"fault": "fault-point", "random": "kill", "commit": "kill"}


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
    p.add_argument(
        "--guarantee",
        choices=GUARANTEES,
        default="exactly_once_v2",
        help="the processing.guarantee the instances run under (default exactly_once_v2)",
    )
    p.add_argument(
        "--kind",
        action="append",
        choices=sorted({*KILL_KINDS, *FAULT_KINDS}),
        help="only these kinds of fault (repeatable; default: every kind of kill); any but "
        "fault, random and commit makes it a campaign",
    )
    p.add_argument(
        "--faults",
        metavar="PLAN",
        help="a campaign mixing these fault kinds: 'all', or e.g. 'kill:2,pause,disk-full' "
        "(weights make a kind more frequent)",
    )
    p.add_argument(
        "--storage-faults",
        type=float,
        default=0.0,
        metavar="RATE",
        help="a campaign with the root on an S3-compatible server behind the fault proxy, "
        "this fraction of requests failing (500, 503, resets) throughout",
    )
    p.add_argument(
        "--object-store",
        action="store_true",
        help="a campaign with the root on an S3-compatible server started for it, behind "
        "the fault proxy (needs the dev extra's moto)",
    )
    p.add_argument("--instances", type=int, default=2, metavar="N", help="in a campaign (2)")
    p.add_argument("--master", metavar="M", help="Spark master of a campaign's instances")
    p.add_argument(
        "--duration", type=float, metavar="S", help="a campaign lasting S seconds of faults"
    )
    p.add_argument(
        "--interval", type=float, default=8.0, metavar="S", help="between a campaign's faults"
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
    _stop_on_sigterm()
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
    kinds = list(args.kind or [])
    if (
        args.faults
        or args.storage_faults
        or args.object_store
        or args.duration
        or any(k not in KILL_KINDS for k in kinds)
    ):
        return _campaign(args, inputs, config, kinds)
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


def _stop_on_sigterm() -> None:
    """A crash test stopped by SIGTERM (a CI job's timeout, a supervisor, ``kill``) cleans
    up as on Ctrl-C: its instances are killed and a campaign's small disks unmounted (else
    they outlive it, and the work directory cannot be deleted)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def _campaign(
    args: argparse.Namespace, inputs: dict[str, str], config: dict[str, object], kinds: list[str]
) -> int:
    """Run a fault campaign (see the module); print its report."""
    faults = kinds_of(args.faults) if args.faults else []
    faults += [_AS_CAMPAIGN.get(k, k) for k in kinds]
    if not faults:
        faults = ["kill"]
    records: list[InputRecord] = []
    for topic, path in inputs.items():
        records.extend(load_jsonl(topic, path, start=len(records)))
    campaign = Campaign(
        args.file,
        faults=faults,
        inputs=records,
        generate=args.generate,
        workdir=args.workdir,
        config=config,
        seed=args.seed,
        instances=args.instances,
        master=args.master,
        object_store=args.object_store,
        storage_faults=args.storage_faults,
    )
    try:
        report = campaign.run(
            duration_s=args.duration,
            count=None if args.duration else args.kills,
            interval_s=args.interval,
            on_fault=_tell,
        )
    finally:
        campaign.close()
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report.to_dict(), f, indent=2, sort_keys=True)
    print(report.text())
    return report.exit_code


def _tell(event: FaultEvent) -> None:
    """One line per fault on stderr, as the campaign goes."""
    recovered = "NOT" if event.recovery_s is None else f"{event.recovery_s:.1f} s"
    print(
        f"fault #{event.index} at {event.at_s:.0f} s: {event.kind} on {event.target} "
        f"({event.detail}); recovered in {recovered}",
        file=sys.stderr,
        flush=True,
    )
