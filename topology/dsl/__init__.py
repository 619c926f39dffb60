"""The DSL: builder, stream and table handles, each operator's wiring."""
