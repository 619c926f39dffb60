"""Transactions: the coordinator, its log, producer ids and the transactional producer."""
