"""Topics written the way the log-damage tests need them: plain producer commits and a
transaction's commit, with known records."""

from __future__ import annotations

from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from runtime.txn.producer import TransactionalProducer

#: Records of one plain commit (:func:`plain_commits`) and of one transaction's commit.
PER_COMMIT, PER_TRANSACTION = 50, 40


def plain_commits(admin: TopicAdmin, topic: str, commits: int) -> None:
    """``commits`` plain producer commits of 50 records each: keys ``k0..k49``, value
    ``v<i>`` and timestamp ``i`` in commit ``i``."""
    producer = Producer(admin)
    for i in range(commits):
        for j in range(PER_COMMIT):
            producer.send(topic, b"k%d" % j, b"v%d" % i, timestamp=i)
        producer.flush()


def transaction_commit(admin: TopicAdmin, topic: str, tid: str = "app") -> TransactionalProducer:
    """One committed transaction of 40 records (keys ``k0..k39``, value ``x``, timestamp 9)
    by ``tid``; return its producer (open: its CompleteCommit may still be landing)."""
    producer = TransactionalProducer(admin, tid)
    producer.init_transactions()
    producer.begin_transaction()
    for j in range(PER_TRANSACTION):
        producer.send(topic, b"k%d" % j, b"x", timestamp=9)
    producer.commit_transaction()
    return producer
