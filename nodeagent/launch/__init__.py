"""How an agent starts job processes: the launch contract, the fork server, the relayed pipe bus."""
