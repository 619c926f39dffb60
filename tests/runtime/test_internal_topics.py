"""Internal topics get Kafka's partition counts: a co-partition group's repartition topics
take the count of the group's source topics."""

from __future__ import annotations

from common.serdes import Serdes
from runtime.app.internal_topics import named_topics, plan_topics, prefetch_indexes
from runtime.storage.topics import TopicAdmin
from topology import Materialized, Produced, StreamsBuilder


def test_a_foreign_key_joins_topics_follow_the_table_they_are_co_partitioned_with(
    admin: TopicAdmin,
) -> None:
    """The subscription topic is read beside the foreign table (2 partitions), the response
    topic beside the primary table (3), whatever the sub-topology writing each reads."""
    admin.create("customers", 2)
    admin.create("orders", 3)
    admin.create("out", 3)
    b = StreamsBuilder()
    customers = b.table("customers", materialized=Materialized.as_("customers-store"))
    orders = b.table("orders", materialized=Materialized.as_("orders-store"))
    orders.left_join(customers, lambda o: o.split(":")[0], lambda o, c: f"{o}@{c}").to_stream().to(
        "out", Produced.with_(Serdes.String(), Serdes.String())
    )
    plan = plan_topics(b.build(), admin, "fk")
    counts = {t: admin.num_partitions(t) for t in admin.list() if t.startswith("fk-")}
    subscription = [t for t in counts if "SUBSCRIPTION-REGISTRATION" in t]
    response = [t for t in counts if "SUBSCRIPTION-RESPONSE" in t]
    assert [counts[t] for t in subscription] == [2]
    assert [counts[t] for t in response] == [3]
    assert counts["fk-customers-store-changelog"] == 2
    assert counts["fk-orders-store-changelog"] == 3
    assert sorted(set(plan.tasks.values())) == [2, 3]


def test_a_start_refreshes_the_indexes_of_every_topic_it_names_at_once(admin: TopicAdmin) -> None:
    """The sources, sinks, changelogs and the positions topic, each once; a topic not
    created yet is left to the step that creates it."""
    admin.create("lines", 2)
    admin.create("counts", 2)
    b = StreamsBuilder()
    b.stream("lines").group_by_key().count(Materialized.as_("counts-store")).to_stream().to(
        "counts", Produced.with_(Serdes.String(), Serdes.Long())
    )
    topology = b.build()
    named = named_topics(topology, "wc")
    assert sorted(named) == ["__consumer_offsets", "counts", "lines", "wc-counts-store-changelog"]
    prefetch_indexes(admin, named)  # two of them do not exist yet: no error
    assert admin.topic_log("lines")._index is not None
    assert admin.topic_log("counts")._index is not None
    plan = plan_topics(topology, admin, "wc")
    assert plan.tasks == {0: 2}
