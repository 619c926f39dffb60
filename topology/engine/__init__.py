"""The task engine: a sub-topology's processor nodes run as one StreamTask."""
