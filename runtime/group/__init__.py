"""Consumer groups: the group coordinator over the CAS log, members, assignors."""
