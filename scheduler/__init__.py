"""The central scheduler, in layers that point one way.

- ``scheduler.core``: the sans-I/O core, a state machine (events in, decisions
  out) that the discrete-event twin and the live scheduler both drive, and the
  snapshot a policy sees;
- ``scheduler.planning``: what policies plan with (placement, availability
  profiles, EASY's shadow);
- ``scheduler.policies`` and ``scheduler.priority``: one module per policy or
  priority source, each citing its paper;
- ``scheduler.live``: the live scheduler's handlers, sans-I/O: requests,
  agents, dispatch, reconciliation, the agent and part lifecycles;
- ``scheduler.runtime``: the I/O shell: the actor (one mailbox, one drain
  loop), the journal (SQLite, WAL), the clock (wall seconds x K) and the
  Prometheus exporter.

``python -m scheduler`` is the process (``accordion scheduler`` wraps it, and
``accordion up`` starts it).
"""
