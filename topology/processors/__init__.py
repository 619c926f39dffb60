"""The processors of the DSL operators: stateless, aggregates, joins."""
