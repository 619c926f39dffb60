"""Long-lived tasks on the executors: task hosts, their server, and the worker's client."""
