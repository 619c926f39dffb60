"""State stores: RocksDB and in-memory stores with a transactional (KIP-892) layer,
changelogs and snapshots. Imports nothing from runtime/."""
