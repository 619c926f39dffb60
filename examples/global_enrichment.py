"""Global enrichment: orders joined with a global table of countries.

``countries`` (2 partitions) is read whole by every instance into the global store
``countries`` (a ``GlobalKTable``); ``orders`` (3 partitions, keyed by order id) need no
co-partitioning with it: each order is left-joined with the country its value names
(``"<country>:<item>"``, the key selector picks the country), and written to
``orders-enriched``; an order of an unknown country gets ``@None``::

    streams-eos run examples/global_enrichment.py --generate 5000 --until-idle

``generate(n)`` produces the countries first, then ``n`` orders (some of countries not in
the table).
"""

from __future__ import annotations

import random

from streams.serdes import Serdes
from topology import Consumed, Materialized, StreamsBuilder, Topology

COUNTRIES = "countries"
ORDERS = "orders"
OUTPUT = "orders-enriched"
TOPICS = {COUNTRIES: 2, ORDERS: 3, OUTPUT: 3}  # a global table needs no co-partitioning

CONFIG = {
    "application.id": "global-enrichment",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
}

CODES = [f"c{i:02d}" for i in range(20)]
START_MS = 1_735_722_000_000  # 2025-01-01T09:00:00Z


def country_of(order_id: str, order: str) -> str:
    """The table key an order joins: its country code."""
    return order.split(":", maxsplit=1)[0]


def enrich(order: str, country: str | None) -> str:
    """The order with its country's name (``None``: not in the table)."""
    return f"{order}@{country}"


def build_topology() -> Topology:
    """Left-join each order with the global table of countries."""
    s = Serdes.String()
    b = StreamsBuilder()
    countries = b.global_table(COUNTRIES, Consumed.with_(s, s), Materialized.as_("countries"))
    orders = b.stream(ORDERS, Consumed.with_(s, s))
    orders.left_join(countries, country_of, enrich).to(OUTPUT)
    return b.build()


def generate(n: int) -> dict[str, list[tuple[str, str, int]]]:
    """Countries (15 of the 20 codes), then ``n`` orders over 37 order ids."""
    rnd = random.Random(1)
    countries = [(code, f"Country-{code}", START_MS) for code in CODES[:15]]
    orders = [(f"order-{i % 37}", f"{rnd.choice(CODES)}:{i}", START_MS + 1 + i) for i in range(n)]
    return {COUNTRIES: countries, ORDERS: orders}
