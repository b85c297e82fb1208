"""Node agents of the live runtime: one per machine.

``nodeagent.agent`` is the actor (registration with a Last Will, heartbeats,
one supervised OS process per job part, wall-time limits, cancel and resize),
with ``nodeagent.admission`` answering its commands and ``nodeagent.cpuset``
pinning MPI-like ranks to its real cores; ``nodeagent.job`` the job process
itself (an MQTT client running the sleep workload at the rate of the shared
``model.execution`` model, or leading an MPI-like part: ``nodeagent.mpi``
and its rank processes, ``nodeagent.ranks``, burning ``nodeagent.kernel``);
``nodeagent.spawn`` and ``nodeagent.pipe`` how parts are started,
``nodeagent.exporter`` its Prometheus metrics, and ``python -m nodeagent`` the
command.
"""
