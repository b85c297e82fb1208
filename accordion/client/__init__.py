"""The live runtime's client: one connection to the scheduler, job specs, and trace replays."""
