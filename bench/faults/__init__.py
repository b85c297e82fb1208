"""The fault matrix of the live runtime: kills, freezes, broker restarts and hostile clients."""
