"""Kafka Streams' own test scenarios, rewritten as facts: the inputs and the outputs Kafka's
tests expect, run through this project's DSL under both engines."""
