"""The crash-recovery harness: a topology under random kills vs a reference."""
