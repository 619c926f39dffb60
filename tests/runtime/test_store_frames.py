"""A store's columns as its serdes type them, and ``streams-eos state --export``: a store's
committed state written as a Delta table, in one process (no Spark)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pydantic import BaseModel

from common.serdes import Serdes
from runtime.app.store_frames import column_type, store_schema
from runtime.app.store_queries import StoreCatalog, catalog_path
from runtime.storage.topics import TopicAdmin
from statestores.stores import Stores
from tests.clitools import cli
from tests.statestores.test_versioned_store import APP, STORE, VersionedTask
from topology.graph.stores import KeyValueStoreFactory, ValueAndTimestampSerde


class Point(BaseModel):
    x: float
    y: float


class Reading(BaseModel):
    sensor: str
    count: int
    ok: bool | None = None
    where: Point
    tags: list[str] = []
    extra: dict[str, int] = {}
    path: tuple[Point, ...] = ()


class Declared:
    """A custom serde that names its Arrow type."""

    arrow_type = pa.int16()

    def serialize(self, topic: str, value: Any) -> bytes:
        return int(value).to_bytes(2, "big")

    def deserialize(self, topic: str, data: bytes) -> Any:
        return int.from_bytes(data, "big")


class Opaque(Declared):
    """A custom serde that names no type: its values come as their bytes."""

    arrow_type = None


def keep_catalog(root: str, value_serde: Any = None) -> KeyValueStoreFactory:
    """Keep the catalog an application would keep for the versioned store ``prices`` of
    :class:`VersionedTask` (string keys; string values unless ``value_serde``)."""
    factory = KeyValueStoreFactory(
        name=STORE,
        key_serde=Serdes.String(),
        value_serde=value_serde or Serdes.String(),
        supplier=Stores.persistent_versioned_key_value_store(STORE, 1_000, 100),
    )
    admin = TopicAdmin(root)
    properties = {"application.id": APP, "processing.guarantee": "exactly_once_v2"}
    admin.root.write_bytes(
        catalog_path(admin, APP),
        pickle.dumps(StoreCatalog(APP, properties, {STORE: (factory, 0)})),
    )
    return factory


def test_columns_are_typed_by_the_serdes() -> None:
    assert column_type(Serdes.String())[0] == pa.string()
    assert column_type(Serdes.Integer())[0] == pa.int32()
    assert column_type(Serdes.Long())[0] == pa.int64()
    assert column_type(Serdes.Double())[0] == pa.float64()
    assert column_type(Serdes.Bytes())[0] == pa.binary()
    assert column_type(Declared())[0] == pa.int16()
    kind, convert = column_type(Opaque())
    assert kind == pa.binary() and convert(Opaque(), 7) == b"\x00\x07"
    kind, convert = column_type(Serdes.Json())
    assert kind == pa.string() and convert(Serdes.Json(), {"a": [1]}) == '{"a":[1]}'
    kind, convert = column_type(Serdes.Pydantic(Reading))
    assert kind == pa.struct(
        [
            ("sensor", pa.string()),
            ("count", pa.int64()),
            ("ok", pa.bool_()),
            ("where", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
            ("tags", pa.list_(pa.string())),
            ("extra", pa.string()),  # a dict: its JSON text
            ("path", pa.list_(pa.struct([("x", pa.float64()), ("y", pa.float64())]))),
        ]
    )
    reading = Reading(
        sensor="s1",
        count=3,
        where=Point(x=1, y=2),
        tags=["a"],
        extra={"b": 2},
        path=(Point(x=0, y=1),),
    )
    cell = convert(Serdes.Pydantic(Reading), reading)
    assert pa.array([cell], kind).to_pylist() == [
        {
            "sensor": "s1",
            "count": 3,
            "ok": None,
            "where": {"x": 1.0, "y": 2.0},
            "tags": ["a"],
            "extra": '{"b":2}',
            "path": [{"x": 0.0, "y": 1.0}],
        }
    ]
    # a DSL store's value-and-timestamp values: the value's type, the timestamp apart
    schema = store_schema("window", Serdes.String(), ValueAndTimestampSerde(Serdes.Long()))
    assert schema.names == ["key", "value", "timestamp", "window_start", "window_end"]
    assert schema.field("value").type == pa.int64()


def test_state_export_writes_the_committed_versions_as_a_delta_table(
    root: str, tmp_path: Path
) -> None:
    task = VersionedTask(root, str(tmp_path / "state"))
    task.write([("a", "1", 10), ("a", "2", 20), ("b", "x", 15)])
    task.write([("a", None, 30), ("a", "3", 40)])
    task.close()
    keep_catalog(root)
    out = str(tmp_path / "export")
    done = cli(root, "state", "--application-id", APP, "--store", STORE, "--export", out)
    assert done.returncode == 0, done.stderr
    assert f"exported 4 entries of store '{STORE}' (1 partitions) to {out}" in done.stdout
    table = DeltaTable(out).to_pyarrow_table()
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    rows = sorted(
        (r["key"], r["value"], r["timestamp"].timestamp() * 1000, r["valid_to"])
        for r in table.to_pylist()
    )
    assert [(k, v, int(t)) for k, v, t, _ in rows] == [
        ("a", "1", 10),
        ("a", "2", 20),
        ("a", "3", 40),
        ("b", "x", 15),
    ]
    assert [r[3] is None for r in rows] == [False, False, True, True]
    again = cli(root, "state", "--application-id", APP, "--store", STORE, "--export", out)
    assert again.returncode != 0 and "holds a Delta table already" in again.stderr


@pytest.mark.parametrize("store", ["nope"])
def test_state_export_of_an_unknown_store_names_the_stores(
    root: str, tmp_path: Path, store: str
) -> None:
    keep_catalog(root)
    done = cli(
        root, "state", "--application-id", APP, "--store", store, "--export", str(tmp_path / "x")
    )
    assert done.returncode != 0
    assert f"has no state store named {store!r} (its stores: {STORE})" in done.stderr
