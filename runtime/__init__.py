"""The runtime: topic storage, producers, coordinators and the Spark driver loop."""
