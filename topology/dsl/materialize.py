"""The key-value store of a materialized table or aggregate: ``Materialized``'s name,
serdes, supplier, caching and logging turned into a store factory."""

from __future__ import annotations

from typing import Any

from common.serdes import Serde
from topology.api.options import Materialized
from topology.graph.stores import KeyValueStoreFactory


def store_factory(
    name: str, mat: Materialized, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
) -> KeyValueStoreFactory:
    """Return the key-value store factory of a materialized table or aggregate; the serdes
    are ``mat``'s, else ``key_serde`` and ``value_serde``."""
    return KeyValueStoreFactory(
        name=name,
        key_serde=mat.key_serde or key_serde,
        value_serde=mat.value_serde or value_serde,
        supplier=mat.supplier,
        caching_enabled=mat.caching_enabled,
        logging_enabled=mat.logging_enabled,
        logging_config=mat.logging_config,
    )
