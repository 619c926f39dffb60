"""The Spark adapters: the session, the topic source and the micro-batch driver loop.

The only place of the project that imports pyspark (besides ``streams`` entry points).
"""
