"""State-store plug-ins over runtime storage and transactions; compaction."""
