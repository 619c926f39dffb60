"""The per-key deduplication of ``benchmarks/vs_tws.py``: a Processor-API node over two
stores with a wall-clock punctuator that forgets keys after a TTL, run by the test driver
under both engines. Its output is what the benchmark checks both systems against."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.topology.conftest import S

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_tws.py"


def load_benchmark() -> ModuleType:
    """Import ``benchmarks/vs_tws.py`` under a private module name."""
    spec = importlib.util.spec_from_file_location("vs_tws_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VS_TWS = load_benchmark()


def topology(ttl_ms: int, punctuate_ms: int, records: int = 0, keys: int = 1) -> Any:
    args = argparse.Namespace(
        ttl_ms=ttl_ms, punctuate_ms=punctuate_ms, records=records, keys=keys, batch_lines=500
    )
    return VS_TWS.DedupJob(args).build_topology(), args


def test_forwards_the_first_event_of_each_key(drive: Any) -> None:
    """Over the benchmark's own input (keys drawn again and again), the output is the
    first event of every key, each once: what the benchmark expects of both systems."""
    built, args = topology(3_600_000, 1_000, records=2_000, keys=300)
    d = drive(built, initial_wall_clock_time_ms=1_000)
    source = d.create_input_topic(VS_TWS.INPUT, S, S)
    out = d.create_output_topic(VS_TWS.OUTPUT, S, S)
    for start in range(0, args.records, VS_TWS.chunk_of(args)):
        keys, values, timestamps = VS_TWS.events(start, VS_TWS.chunk_of(args), args.keys)
        for key, value, ts in zip(keys, values, timestamps, strict=True):
            source.pipe_input(key.decode(), value.decode(), ts)
        d.advance_wall_clock_time(400)  # punctuations run; nothing is old enough to go
    got = [(r.key, (r.value, r.timestamp)) for r in out.read_records_to_list()]
    expected = VS_TWS.expected_firsts(args)
    assert dict(got) == expected
    assert len(got) == len(expected) < args.records
    assert len(list(d.get_key_value_store(VS_TWS.BY_TIME).all())) == len(expected)


def test_the_punctuator_forgets_keys_after_the_ttl(drive: Any) -> None:
    """A key stored at wall-clock 1000 with a TTL of 500 ms is still remembered by the
    punctuation at 1300 and forgotten by the one at 1600 (from both stores); its next
    event is forwarded again and remembered from then on."""
    built, _args = topology(500, 100)
    d = drive(built, initial_wall_clock_time_ms=1_000)
    source = d.create_input_topic(VS_TWS.INPUT, S, S)
    out = d.create_output_topic(VS_TWS.OUTPUT, S, S)
    seen = d.get_key_value_store(VS_TWS.SEEN)
    by_time = d.get_key_value_store(VS_TWS.BY_TIME)
    source.pipe_input("a", "a1", 1)
    source.pipe_input("b", "b1", 2)
    source.pipe_input("a", "a2", 3)
    assert out.read_key_values_to_list() == [("a", "a1"), ("b", "b1")]
    assert seen.get("a") == 1_000
    d.advance_wall_clock_time(300)  # punctuates at 1300: stored at 1000, not yet 500 old
    source.pipe_input("a", "a3", 4)
    assert out.is_empty()
    d.advance_wall_clock_time(300)  # punctuates at 1600: both entries are 600 old
    assert seen.get("a") is None and seen.get("b") is None
    assert list(by_time.all()) == []
    source.pipe_input("a", "a4", 5)
    source.pipe_input("a", "a5", 6)
    assert out.read_key_values_to_list() == [("a", "a4")]
    assert seen.get("a") == 1_600
    assert list(by_time.all()) == [(f"{1_600:013d}|a", "a")]
