"""``streams-eos s3-proxy``: run the fault-injecting proxy (:mod:`streams.crash.s3proxy`)
in front of an S3-compatible endpoint, to check a topology against a bad day of its
object store: point ``storage.options.AWS_ENDPOINT_URL`` at the address it prints.

::

    streams-eos s3-proxy --target http://127.0.0.1:9000 --fault 503:0.05 \\
        --fault lose-answer:0.01:PUT:_delta_log/ [--port 9100] [--seed 1]

Each ``--fault`` is ``KIND[:RATE[:METHOD[:PATH_REGEX]]]``, KIND one of 500, 503, reset,
timeout, latency, lose-answer. It runs until interrupted, then prints what it injected.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from streams.cli import COMMANDS
from streams.crash.s3proxy import KINDS, FaultProxy, FaultRule


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``s3-proxy`` subcommand."""
    p = sub.add_parser(
        "s3-proxy",
        parents=[common],
        help=COMMANDS["s3-proxy"][1],
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("--target", required=True, metavar="URL", help="the store, http://host:port")
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND[:RATE[:METHOD[:PATH]]]",
        help=f"a fault rule (repeatable); KIND: {', '.join(KINDS)}",
    )
    p.add_argument("--port", type=int, default=0, help="the port to listen on (default: any)")
    p.add_argument("--seed", type=int, help="the random seed")
    p.add_argument("--latency-ms", type=int, default=100, help="a latency fault's delay")
    p.add_argument("--timeout-s", type=float, default=30.0, help="a timeout fault's hold")
    p.set_defaults(handler=run, needs_root=False)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; print the faults injected."""
    rules = [FaultRule.parse(spec) for spec in args.fault]
    for rule in rules:
        rule.latency_ms = args.latency_ms
    proxy = FaultProxy(args.target, rules, seed=args.seed, timeout_s=args.timeout_s, port=args.port)
    try:  # an interrupt as early as right after the line below still prints the summary
        with proxy:
            print(
                f"s3-proxy: listening on {proxy.endpoint}, forwarding to {args.target}", flush=True
            )
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    print(json.dumps({"forwarded": proxy.forwarded, "injected": proxy.summary()}), file=sys.stderr)
    return 0
