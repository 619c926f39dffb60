"""Topologies the crash tests run besides the examples (operators the examples do not use)."""
