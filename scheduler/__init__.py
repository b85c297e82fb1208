"""The central scheduler: a sans-I/O core, its policies, and the live actor around it.

``scheduler.core`` is a state machine (events in, commands out) that both the
discrete-event twin and the live scheduler actor drive; ``scheduler.policies``
holds one module per policy, each citing its paper. ``scheduler.actor`` runs
the core on a bus (one mailbox, one drain loop), with ``scheduler.journal``
(SQLite, WAL) for what must survive it, ``scheduler.clock`` for cluster time
(wall seconds x K) and ``scheduler.exporter`` for its Prometheus metrics;
``python -m scheduler`` is the process (``accordion scheduler`` wraps it, and
``accordion up`` starts it).
"""
