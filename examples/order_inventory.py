"""Order + inventory: one order stream, two output topics committed atomically.

Orders arrive on ``orders`` keyed by order id, each with a few lines ``{sku, qty}``. Every
order gets a confirmation on ``order-confirmations`` (``confirmed`` with its total, or
``rejected`` with the reason: an unknown SKU or a bad quantity), and every line of a
confirmed order becomes an inventory movement on ``inventory-updates``, keyed by SKU so
that a warehouse consumer sees all movements of a SKU in one partition::

    streams-eos run examples/order_inventory.py --generate 5000 --until-idle

Both topics are written in the micro-batch's one transaction, with the consumed offsets: a
read_committed consumer sees an order's confirmation exactly when it sees its inventory
movements, never one without the other, and never twice.
"""

from __future__ import annotations

import random
from typing import Any

from streams.serdes import Serdes
from topology import Produced, StreamsBuilder, Topology

INPUT = "orders"
CONFIRMATIONS = "order-confirmations"
INVENTORY = "inventory-updates"
TOPICS = {INPUT: 4, CONFIRMATIONS: 4, INVENTORY: 4}

CONFIG = {
    "application.id": "order-inventory",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "json",
}

#: Unit prices in cents of the SKUs the shop sells.
CATALOG = {
    "sku-bolt-m4": 12,
    "sku-bracket": 349,
    "sku-drill": 8_999,
    "sku-glue": 499,
    "sku-hammer": 1_599,
    "sku-nut-m4": 9,
    "sku-saw": 2_450,
    "sku-tape": 299,
}
MAX_QTY = 50
ORDERS_START_MS = 1_735_722_000_000  # 2025-01-01T09:00:00Z


def problem(order: dict[str, Any]) -> str | None:
    """Return why ``order`` cannot be confirmed, or None if it can."""
    if not order.get("lines"):
        return "no lines"
    for line in order["lines"]:
        if line["sku"] not in CATALOG:
            return f"unknown sku {line['sku']}"
        if not 0 < int(line["qty"]) <= MAX_QTY:
            return f"quantity {line['qty']} of {line['sku']} outside 1..{MAX_QTY}"
    return None


def confirmation(order: dict[str, Any]) -> dict[str, Any]:
    """The confirmation of ``order``: confirmed with its total, or rejected with a reason."""
    reason = problem(order)
    if reason is not None:
        return {"order_id": order["order_id"], "status": "rejected", "reason": reason}
    total = sum(CATALOG[line["sku"]] * int(line["qty"]) for line in order["lines"])
    units = sum(int(line["qty"]) for line in order["lines"])
    return {"order_id": order["order_id"], "status": "confirmed", "units": units, "total": total}


def movements(order: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The inventory movements ``(sku, movement)`` of ``order``: none unless it is valid."""
    if problem(order) is not None:
        return []
    return [
        (
            line["sku"],
            {"sku": line["sku"], "delta": -int(line["qty"]), "order_id": order["order_id"]},
        )
        for line in order["lines"]
    ]


def build_topology() -> Topology:
    """Confirm (or reject) each order and emit its inventory movements, in one sub-topology."""
    builder = StreamsBuilder()
    orders = builder.stream(INPUT)
    json = Produced.with_(Serdes.String(), Serdes.Json())
    orders.map_values(confirmation, named="confirm").to(CONFIRMATIONS, json)
    orders.flat_map(lambda _id, order: movements(order), named="reserve").to(INVENTORY, json)
    return builder.build()


def generate(n: int, seed: int = 42) -> list[tuple[str, dict[str, Any], int]]:
    """Return ``n`` orders ``(order id, order, timestamp)`` of 1 to 4 lines, 1 s apart; about
    one in twenty has an unknown SKU or a bad quantity."""
    rng = random.Random(seed)
    skus = sorted(CATALOG)
    orders = []
    for i in range(n):
        order_id = f"order-{i:06d}"
        lines = [
            {"sku": sku, "qty": rng.randint(1, 12)} for sku in rng.sample(skus, rng.randint(1, 4))
        ]
        roll = rng.random()
        if roll < 0.03:
            lines[0]["sku"] = "sku-discontinued"
        elif roll < 0.05:
            lines[-1]["qty"] = rng.choice((0, -1, MAX_QTY + 1))
        order = {"order_id": order_id, "customer": f"customer-{rng.randint(1, 300):03d}"}
        orders.append((order_id, {**order, "lines": lines}, ORDERS_START_MS + 1_000 * i))
    return orders


if __name__ == "__main__":
    import sys

    from streams.cli.run import main_for

    sys.exit(main_for(__file__))
