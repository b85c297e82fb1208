"""The scheduler core: a sans-I/O state machine, events in and decisions out; what policies see."""
