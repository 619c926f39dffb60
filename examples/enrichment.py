"""Enrichment: a stream of purchases joined with a table of customers.

``customers`` is a changelog of customer profiles keyed by customer id, read as a
``KTable`` (its latest profile per customer, in the RocksDB store ``customers-store``).
``purchases`` is a stream keyed by the same customer id, with as many partitions, so the
two are co-partitioned: the task of partition ``p`` holds the customers and sees the
purchases of partition ``p``. Each purchase is left-joined with its customer's current
profile (a guest, with no profile, gets ``tier: guest``), priced with the tier's discount,
and written to ``purchases-enriched``::

    streams-eos run examples/enrichment.py --generate 5000 --until-idle

``generate(n)`` produces the customers first (with earlier timestamps), then ``n``
purchases, so every purchase finds the profile its customer had when it was made.
"""

from __future__ import annotations

import random
from typing import Any

from streams.serdes import Serdes
from topology import Materialized, Produced, StreamsBuilder, Topology

CUSTOMERS = "customers"
PURCHASES = "purchases"
OUTPUT = "purchases-enriched"
STORE = "customers-store"
TOPICS = {CUSTOMERS: 4, PURCHASES: 4, OUTPUT: 4}  # the join needs equal partition counts

CONFIG = {
    "application.id": "enrichment",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "json",
}

#: Discount in percent per loyalty tier.
DISCOUNT = {"guest": 0, "bronze": 0, "silver": 5, "gold": 10, "platinum": 15}
TIERS = ["bronze", "bronze", "bronze", "silver", "silver", "gold", "platinum"]
COUNTRIES = ["DE", "FR", "NL", "PL", "SE", "US"]
PRODUCTS = {"espresso": 250, "flat-white": 380, "croissant": 290, "beans-1kg": 2_400}
START_MS = 1_735_722_000_000  # 2025-01-01T09:00:00Z


def enrich(purchase: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    """The purchase with its customer's name, country and tier, and the discounted price."""
    tier = "guest" if customer is None else customer["tier"]
    price = purchase["price"] * (100 - DISCOUNT[tier]) // 100
    return {
        **purchase,
        "name": None if customer is None else customer["name"],
        "country": None if customer is None else customer["country"],
        "tier": tier,
        "paid": price,
    }


def build_topology() -> Topology:
    """Left-join each purchase with its customer's profile."""
    builder = StreamsBuilder()
    customers = builder.table(CUSTOMERS, materialized=Materialized.as_(STORE))
    (
        builder.stream(PURCHASES)
        .left_join(customers, enrich)
        .to(OUTPUT, Produced.with_(Serdes.String(), Serdes.Json()))
    )
    return builder.build()


def _customers(rng: random.Random, count: int) -> list[tuple[str, dict[str, Any] | None, int]]:
    """``count`` profiles, then upgrades to gold of about one in ten and one closed account
    (a tombstone: the table forgets it), all before the first purchase."""
    profiles: list[tuple[str, dict[str, Any] | None, int]] = []
    for c in range(count):
        profile = {
            "name": f"Customer {c}",
            "country": rng.choice(COUNTRIES),
            "tier": rng.choice(TIERS),
        }
        profiles.append((f"customer-{c:04d}", profile, START_MS - 3_600_000 + 1_000 * c))
    changed = rng.sample(range(count), max(2, count // 10) + 1)
    changes: list[tuple[str, dict[str, Any] | None, int]] = []
    for j, c in enumerate(changed[1:]):
        key, old, _ = profiles[c]
        changes.append((key, {**(old or {}), "tier": "gold"}, START_MS - 60_000 + j))
    changes.append((f"customer-{changed[0]:04d}", None, START_MS - 1_000))
    return profiles + changes


def generate(n: int, seed: int = 42) -> dict[str, list[tuple[str, Any, int]]]:
    """Return the input per topic, customers first: ``max(10, n // 5)`` profiles and their
    changes, then ``n`` purchases, 2 s apart, about one in ten by a guest with no
    profile."""
    rng = random.Random(seed)
    count = max(10, n // 5)
    customers = _customers(rng, count)
    purchases: list[tuple[str, Any, int]] = []
    for i in range(n):
        known = rng.random() >= 0.1
        customer = rng.randrange(count) if known else count + rng.randrange(count)
        product = rng.choice(sorted(PRODUCTS))
        purchase = {
            "purchase_id": f"purchase-{i:06d}",
            "product": product,
            "price": PRODUCTS[product],
        }
        purchases.append((f"customer-{customer:04d}", purchase, START_MS + 2_000 * i))
    return {CUSTOMERS: list(customers), PURCHASES: purchases}


if __name__ == "__main__":
    import sys

    from streams.cli.run import main_for

    sys.exit(main_for(__file__))
