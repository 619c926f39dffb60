"""The application (Kafka's KafkaStreams): lifecycle, identity, topics."""
