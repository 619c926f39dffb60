"""The stream thread: group membership, read plan, batch loop, commit."""
