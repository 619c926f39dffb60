"""The TopologyTestDriver behind ``streams.testkit.driver`` (Kafka's test-utils)."""
