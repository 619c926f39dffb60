"""Word count: Kafka Streams' WordCountDemo, exactly once.

Reads lines from ``text-lines``, splits them into words, counts each word in a RocksDB
store (``word-counts``), and writes every updated count to ``word-counts-out``::

    streams-eos run examples/wordcount.py --generate 10000 --until-idle

(``TOPICS`` are created when missing; ``--generate`` first produces sample lines.) The same
file runs under ``spark-submit examples/wordcount.py --until-idle``.
"""

from __future__ import annotations

import random
import re

from streams.serdes import Serdes
from topology import Materialized, Produced, StreamsBuilder, Topology

WORD = re.compile(r"\w+")
INPUT = "text-lines"
OUTPUT = "word-counts-out"
STORE = "word-counts"
TOPICS = {INPUT: 4, OUTPUT: 4}

CONFIG = {
    "application.id": "wordcount",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
}

WORDS = [
    "exactly",
    "once",
    "stream",
    "table",
    "state",
    "store",
    "topic",
    "partition",
    "offset",
    "commit",
    "transaction",
    "kafka",
    "spark",
    "delta",
    "rocksdb",
    "window",
    "join",
    "count",
    "aggregate",
    "reduce",
    "record",
    "key",
    "value",
]


def build_topology() -> Topology:
    """Split lines into words and count them."""
    builder = StreamsBuilder()
    (
        builder.stream(INPUT)
        .flat_map_values(lambda line: WORD.findall(line.lower()))
        .group_by(lambda _key, word: word)
        .count(Materialized.as_(STORE))
        .to_stream()
        .to(OUTPUT, Produced.with_(Serdes.String(), Serdes.Long()))
    )
    return builder.build()


def generate(n: int, seed: int = 42) -> list[tuple[str | None, str]]:
    """Return ``n`` random (key, line) pairs of 3 to 12 words."""
    rng = random.Random(seed)
    return [
        (f"line-{i}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))))
        for i in range(n)
    ]


if __name__ == "__main__":
    import sys

    from streams.cli.run import main_for

    sys.exit(main_for(__file__))
