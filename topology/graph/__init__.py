"""The graph the DSL records and ``build()`` freezes into a Topology."""
