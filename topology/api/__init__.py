"""Records, processors, timestamps, options, windows: shared by DSL and engine."""
