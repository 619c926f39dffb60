"""Orders priced through a stream-table join with a versioned table and a grace period
(KIP-914, KIP-923).

``prices`` (a table keyed by product, in a versioned store) and ``orders`` (a stream keyed
by product) are co-partitioned. Each order waits in the join's grace buffer, then is joined
with the price valid at the order's timestamp (a left join: an unknown product gets
``None``). Every product has three prices before the first order, and a "future" price
after the last one: an order is always priced with its product's third price, whenever the
future price arrives, which only a versioned table gives. Some orders come a little out of
order (within the grace period), so the buffer reorders them. A last order per product
lets every partition's buffer out, so what stays buffered does not depend on how the
products spread over the partitions.
"""

from __future__ import annotations

from statestores.stores import Stores
from streams.serdes import Serdes
from topology import Joined, Materialized, Produced, StreamsBuilder, Topology

PRICES = "prices"
ORDERS = "orders"
OUTPUT = "priced-orders"
TOPICS = {PRICES: 2, ORDERS: 2, OUTPUT: 2}
CONFIG = {
    "application.id": "versioned-join",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "statestore.cache.max.bytes": 0,
}
START_MS = 1_735_722_000_000
HISTORY_MS = 86_400_000
GRACE_MS = 10


def build_topology() -> Topology:
    """Left-join each order with its product's price as of the order."""
    b = StreamsBuilder()
    store = Stores.persistent_versioned_key_value_store("prices-store", HISTORY_MS)
    prices = b.table(PRICES, materialized=Materialized.as_(store))
    orders = b.stream(ORDERS)
    joined = Joined.as_("priced").with_grace_period(GRACE_MS)
    (
        orders.left_join(prices, lambda o, p: f"{o}@{p}", joined).to(
            OUTPUT, Produced.with_(Serdes.String(), Serdes.String())
        )
    )
    return b.build()


def generate(n: int) -> dict[str, list[tuple[str, str, int]]]:
    """Six products with three prices each and a future one; ``12 n`` orders (a join is
    quick: enough to run through five kills on a busy machine) of seven products (one
    unknown), every fourth 5 ms late."""
    prices = [(f"p{j}", f"{j}.{v}", START_MS + v) for v in range(3) for j in range(6)]
    prices += [(f"p{j}", f"future-{j}", START_MS + 1_000_000 + j) for j in range(6)]
    orders = [
        (f"p{i % 7}", f"o{i:04d}", START_MS + 100 + 2 * i - (5 if i % 4 == 3 else 0))
        for i in range(12 * n)
    ]
    # a last order of every product, 10 s later: every partition's buffer lets the
    # orders before out (these stay buffered, in every partition as in the reference)
    orders += [(f"p{j}", f"last-{j}", START_MS + 10_000 + j) for j in range(7)]
    return {PRICES: prices, ORDERS: orders}
