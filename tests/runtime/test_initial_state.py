"""A store's initial state: bad inputs are named, a load is one commit and happens once,
a store that holds state already keeps it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.app.initial_state import InitialState, load_initial_state
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from tests.runtime.spark.upgrade_app import config, word_count


def setup(admin: TopicAdmin, root: str, tmp_path: Path) -> tuple[StreamsConfig, str]:
    conf = StreamsConfig(**config(root, str(tmp_path / "state")))
    admin.create("upgrade-wc-counts-changelog", 2)
    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"word": ["a", "b", "c"], "n": [1, 2, 3], "t": [5, 6, 7]}))
    return conf, table


def test_a_load_is_one_commit_once_and_bad_inputs_are_named(
    admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    conf, table = setup(admin, root, tmp_path)
    topology = word_count("named")
    missing = {"counts": InitialState.delta(table, key="word", value="count")}
    with pytest.raises(StreamsError, match=r"no column 'count' in the data \(its columns: word"):
        load_initial_state(admin, topology, conf, missing)
    rows = {"counts": InitialState.delta(table, key="word")}  # values: dicts of n and t
    with pytest.raises(StreamsError, match=r"store 'counts': a row .* Name the value column"):
        load_initial_state(admin, topology, conf, rows)
    with pytest.raises(StreamsError, match="store 'nope', not in the topology"):
        load_initial_state(admin, topology, conf, {"nope": InitialState.delta(table, key="word")})
    source = {"counts": InitialState.delta(table, key="word", value="n", timestamp="t")}
    assert load_initial_state(admin, topology, conf, source) == {"counts": 3}
    assert load_initial_state(admin, topology, conf, source) == {}  # once
    log = admin.index("upgrade-wc-counts-changelog")
    assert log.version == 1 and sum(log.end_offsets().values()) == 3  # one commit
    stamps = {
        r.key: r.timestamp
        for p in range(2)
        for r in TopicReader(root).records("upgrade-wc-counts-changelog", p, 0)
    }
    assert stamps == {b"a": 5, b"b": 6, b"c": 7}


def test_a_store_with_state_keeps_it(admin: TopicAdmin, root: str, tmp_path: Path) -> None:
    conf, table = setup(admin, root, tmp_path)
    producer = Producer(admin)
    producer.send("upgrade-wc-counts-changelog", b"x", b"y", partition=0)
    producer.flush()
    source = {"counts": InitialState.delta(table, key="word", value="n")}
    assert load_initial_state(admin, word_count("named"), conf, source) == {}
