"""Parity of stateless operators: map/filter/flat_map chains, headers, branch/merge,
pattern sources and topic-name-extractor sinks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.parity.harness import Case, Snapshot, check_parity, rec
from topology import Branched, FixedKeyProcessor, Record, StreamsBuilder, Topology


def _chain() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("in")
        .filter(lambda k, v: not v.startswith("x"))
        .flat_map(lambda k, v: [(f"{k}-{w}", w) for w in v.split()])
        .map_values(str.upper)
        .filter_not(lambda k, v: v == "SKIP")
        .map(lambda k, v: (v[:1], f"{k}:{v}"))
        .to("out")
    )
    return b.build()


def _check_chain(s: Snapshot) -> None:
    assert s.count("out") >= 10 and not any("SKIP" in v for v in s.values("out"))


CHAIN = Case(
    name="map-filter-flatmap-chain",
    build=_chain,
    inputs=[
        rec("in", f"k{i % 3}", v, 10 + i)
        for i, v in enumerate(
            ["a b", "xdrop", "c skip d", "e", "f g h", "xno", "a", "b b", "skip", "c d e"]
        )
    ],
    outputs=("out",),
    max_poll_records=3,
    check=_check_chain,
)


class Stamp(FixedKeyProcessor[str, str, str]):
    """Adds a header naming the value's length and moves the timestamp by +5."""

    def process(self, record: Record[str, str]) -> None:
        headers = (*record.headers, ("len", str(len(record.value)).encode()))
        self.context.forward(
            record.with_value(record.value[::-1])
            .with_headers(headers)
            .with_timestamp(record.timestamp + 5)
        )


def _headers() -> Topology:
    b = StreamsBuilder()
    s = b.stream("in")
    s.map_values(str.upper).to("plain")
    s.process_values(Stamp).to("stamped")
    return b.build()


def _check_headers(s: Snapshot) -> None:
    headers = [h for per in s.outputs["stamped"].values() for _, _, h in per]
    assert all(("len", b"3") in h or ("len", b"2") in h for h in headers)
    assert any(len(h) == 3 for h in headers)  # input headers (one duplicated) kept


HEADERS = Case(
    name="headers-and-timestamps",
    build=_headers,
    inputs=[
        rec("in", "a", "abc", 5, [("trace", b"1")]),
        rec("in", "b", "de", 6),
        rec("in", "a", "fgh", 7, [("trace", b"2"), ("trace", None)]),
        rec("in", "c", "ij", 3, [("x", b"")]),
        rec("in", "b", "klm", 9, [("trace", b"3")]),
    ],
    outputs=("plain", "stamped"),
    max_poll_records=1,
    check=_check_headers,
)


def _branch_merge() -> Topology:
    b = StreamsBuilder()
    branches = (
        b.stream("in")
        .split(named="b-")
        .branch(lambda k, v: v.startswith("a"), Branched.as_("a"))
        .branch(lambda k, v: v.startswith("b"), Branched.as_("b"))
        .default_branch(Branched.as_("rest"))
    )
    a = branches["b-a"].map_values(lambda v: f"A:{v}")
    bb = branches["b-b"].map_values(lambda v: f"B:{v}")
    a.merge(bb).to("merged")
    branches["b-rest"].to("rest")
    return b.build()


def _check_branch(s: Snapshot) -> None:
    values = s.values("merged")
    assert any(v.startswith("A:") for v in values) and any(v.startswith("B:") for v in values)
    assert s.count("rest") >= 2


BRANCH_MERGE = Case(
    name="branch-merge",
    build=_branch_merge,
    inputs=[
        rec("in", f"k{i % 2}", v, i)
        for i, v in enumerate(["a1", "b1", "c1", "a2", "b2", "d1", "a3", "b3", "c2"])
    ],
    outputs=("merged", "rest"),
    max_poll_records=4,
    check=_check_branch,
)


def _pattern() -> Topology:
    b = StreamsBuilder()
    b.stream(re.compile(r"pat-.*")).map_values(str.upper).to("out")
    return b.build()


PATTERN = Case(
    name="pattern-source",
    build=_pattern,
    # two matching topics in one task: interleaved by timestamp, so ordered by it here
    inputs=[rec("pat-a" if i % 3 else "pat-b", f"k{i % 2}", f"v{i}", i) for i in range(8)],
    outputs=("out",),
    topics={"other": 1},
    max_poll_records=2,
    check=lambda s: s.count("out") == 8,
)


def _extractor() -> Topology:
    b = StreamsBuilder()
    b.stream("in").map_values(str.upper).to(lambda k, v, ctx: f"to-{k}")
    return b.build()


EXTRACTOR = Case(
    name="topic-name-extractor-sink",
    build=_extractor,
    inputs=[rec("in", "ab"[i % 2], f"v{i}", i) for i in range(6)],
    outputs=("to-a", "to-b"),
    max_poll_records=5,
    check=lambda s: s.count("to-a") == 3 and s.count("to-b") == 3,
)

CASES = [CHAIN, HEADERS, BRANCH_MERGE, PATTERN, EXTRACTOR]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
