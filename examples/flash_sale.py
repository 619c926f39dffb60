"""Flash sale: a limited stock per item, orders accepted until it runs out, never oversold.

Orders arrive on ``flash-sale-orders`` keyed by item, so every order for an item is handled
by the one task that owns the item's stock. A Processor-API processor keeps the remaining
stock per item in a RocksDB store (``flash-sale-stock``, starting from ``INITIAL_STOCK``);
an order is accepted if the remaining stock covers its quantity, and rejected otherwise.
Accepted orders go to ``flash-sale-accepted``, rejected ones to ``flash-sale-rejected``::

    streams-eos run examples/flash_sale.py --generate 5000 --until-idle

The stock update, the accepted or rejected record and the consumed offset commit in one
transaction: a crash and replay can neither sell a unit twice nor lose a sale.
"""

from __future__ import annotations

import random
from typing import Any

from statestores.stores import Stores
from streams.serdes import Serdes
from topology import Branched, Processor, Produced, Record, StreamsBuilder, Topology

INPUT = "flash-sale-orders"
ACCEPTED = "flash-sale-accepted"
REJECTED = "flash-sale-rejected"
STORE = "flash-sale-stock"
TOPICS = {INPUT: 4, ACCEPTED: 4, REJECTED: 4}

CONFIG = {
    "application.id": "flash-sale",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "json",
}

#: Units on sale per item when the sale opens.
INITIAL_STOCK = {
    "console": 15,
    "headphones": 60,
    "laptop": 10,
    "phone": 40,
    "tablet": 20,
    "watch": 25,
}
#: How many times likelier an order is for each item (the laptop deal is the hot one).
POPULARITY = {"console": 3, "headphones": 4, "laptop": 6, "phone": 5, "tablet": 2, "watch": 2}
SALE_OPENS_MS = 1_732_870_800_000  # 2024-11-29T09:00:00Z


class ReserveStock(Processor[str, dict[str, Any], str, dict[str, Any]]):
    """Accept an order if the item's remaining stock covers it, else reject it."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.stock = context.get_state_store(STORE)

    def process(self, record: Record[str, dict[str, Any]]) -> None:
        item, order = record.key, record.value
        remaining = self.stock.get(item)
        if remaining is None:  # the item's first order: the sale's initial stock
            remaining = INITIAL_STOCK.get(item, 0)
        qty = int(order["qty"])
        if 0 < qty <= remaining:
            remaining -= qty
            self.stock.put(item, remaining)
            result = {**order, "status": "accepted", "remaining": remaining}
        else:
            reason = "sold out" if remaining == 0 else "not enough stock"
            result = {**order, "status": "rejected", "reason": reason, "remaining": remaining}
        self.context.forward(record.with_value(result))


def build_topology() -> Topology:
    """Reserve stock per item; split the results into accepted and rejected orders."""
    builder = StreamsBuilder()
    builder.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store(STORE), Serdes.String(), Serdes.Integer()
        )
    )
    results = builder.stream(INPUT).process(ReserveStock, STORE, named="reserve-stock")
    branches = (
        results.split(named="order-")
        .branch(lambda _item, r: r["status"] == "accepted", Branched.as_("accepted"))
        .default_branch(Branched.as_("rejected"))
    )
    json = Produced.with_(Serdes.String(), Serdes.Json())
    branches["order-accepted"].to(ACCEPTED, json)
    branches["order-rejected"].to(REJECTED, json)
    return builder.build()


def generate(n: int, seed: int = 42) -> list[tuple[str, dict[str, Any], int]]:
    """Return ``n`` orders ``(item, order, timestamp)``, 50 ms apart from the sale's start."""
    rng = random.Random(seed)
    items = sorted(POPULARITY)
    weights = [POPULARITY[i] for i in items]
    orders = []
    for i in range(n):
        item = rng.choices(items, weights)[0]
        order = {
            "order_id": f"order-{i:06d}",
            "customer": f"customer-{rng.randint(1, 500):03d}",
            "item": item,
            "qty": rng.choice((1, 1, 1, 2, 3)),
        }
        orders.append((item, order, SALE_OPENS_MS + 50 * i))
    return orders


if __name__ == "__main__":
    import sys

    from streams.cli.run import main_for

    sys.exit(main_for(__file__))
