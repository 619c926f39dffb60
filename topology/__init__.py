"""The topology DSL: StreamsBuilder, KStream, KTable and their compilation into
sub-topologies. Imports no pyspark."""
