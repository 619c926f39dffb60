"""The processors of the DSL operators: stateless, tables, aggregates, windows, suppression,
joins."""
