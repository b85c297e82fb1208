"""A local cluster of processes, supervised: broker, scheduler and agents on this machine."""
