"""The live scheduler's handlers, sans-I/O: requests, agents, parts, lifecycles, reconciliation."""
