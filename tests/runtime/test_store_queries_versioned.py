"""Interactive queries of a versioned store (KIP-960, KIP-968) on the driver: a standby
replica restored from the store's changelog answers ``get(key)``, ``get(key, as_of)`` and
the versions of a key in a time range."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import StreamsConfig
from common.serdes import Serdes
from runtime.app.store_queries import InvalidStateStoreError, QueryableStore
from runtime.storage.topics import TopicAdmin
from statestores.api import VersionedRecord
from statestores.stores import Stores
from tests.statestores.test_versioned_store import APP, STORE, VersionedTask
from topology.graph.stores import KeyValueStoreFactory


def test_queries_answer_the_committed_versions(root: str, tmp_path: Path) -> None:
    task = VersionedTask(root, str(tmp_path / "state"))
    task.write([("a", "1", 10), ("a", "2", 20), ("b", "x", 15)])
    task.write([("a", None, 30), ("a", "3", 40), ("a", "late", 25)])
    factory = KeyValueStoreFactory(
        name=STORE,
        key_serde=Serdes.String(),
        value_serde=Serdes.String(),
        supplier=Stores.persistent_versioned_key_value_store(STORE, 1_000, 100),
    )
    config = StreamsConfig(
        **{
            "application.id": APP,
            "topics.root": root,
            "processing.guarantee": "exactly_once_v2",
        }
    )
    with QueryableStore(factory, 0, config, TopicAdmin(root), STORE) as store:
        assert store.kind == "versioned"
        assert store.get("a") == VersionedRecord("3", 40, None)
        assert store.get("a", 22) == VersionedRecord("2", 20, 25)
        assert store.get("a", 31) is None  # deleted then
        assert store.get("missing", 31) is None
        assert store.get_versions("a", 0, 35, ascending=True) == [
            VersionedRecord("1", 10, 20),
            VersionedRecord("2", 20, 25),
            VersionedRecord("late", 25, 30),
        ]
        assert [r.value for r in store.get_versions("a")] == ["3", "late", "2", "1"]
        task.write([("b", "y", 50)])  # a later commit is seen by the next query
        assert store.get("b") == VersionedRecord("y", 50, None)
        assert store.get("b", 20) == VersionedRecord("x", 15, 50)
        with pytest.raises(InvalidStateStoreError, match="not a key-value store"):
            store.all()
    task.close()
