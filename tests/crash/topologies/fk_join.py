"""Orders enriched with their customer through a foreign-key join.

``customers`` (a table keyed by customer id) and ``orders`` (a table keyed by order id,
value ``"<customer>:<item>"``) are co-partitioned only by the join's own subscription and
response topics: each order subscribes to its customer's partition, the customer's
partition answers, and the order's partition joins (a left join: an order of an unknown
customer gets ``None``). The generator writes the customers first and each order once, so
the result does not depend on how the cycle interleaves with customer updates.
"""

from __future__ import annotations

from streams.serdes import Serdes
from topology import Materialized, Produced, StreamsBuilder, Topology

CUSTOMERS = "customers"
ORDERS = "orders"
OUTPUT = "orders-with-customer"
TOPICS = {CUSTOMERS: 2, ORDERS: 3, OUTPUT: 3}
CONFIG = {
    "application.id": "fk-join",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "statestore.cache.max.bytes": 0,
}
START_MS = 1_735_722_000_000


def customer_of(order: str) -> str:
    """The foreign key: the customer id in front of the order's value."""
    return order.split(":", maxsplit=1)[0]


def build_topology() -> Topology:
    """Left-join each order with its customer."""
    b = StreamsBuilder()
    customers = b.table(CUSTOMERS, materialized=Materialized.as_("customers-store"))
    orders = b.table(ORDERS, materialized=Materialized.as_("orders-store"))
    (
        orders.left_join(customers, customer_of, lambda o, c: f"{o}@{c}")
        .to_stream()
        .to(OUTPUT, Produced.with_(Serdes.String(), Serdes.String()))
    )
    return b.build()


def generate(n: int) -> dict[str, list[tuple[str, str, int]]]:
    """12 customers, then ``n`` orders of 14 customer ids (two unknown)."""
    customers = [(f"c{i:02d}", f"Customer-{i}", START_MS) for i in range(12)]
    orders = [(f"o{i:04d}", f"c{i % 14:02d}:item-{i}", START_MS + 1 + i) for i in range(n)]
    return {CUSTOMERS: customers, ORDERS: orders}
