"""Node agents of the live runtime: one per machine.

- ``nodeagent.agent``: the actor (registration with a Last Will, heartbeats,
  admission of starts, resizes and cancels, its parts' runs, CPU pinning, its
  Prometheus metrics);
- ``nodeagent.launch``: how a part's process is started (the launch
  description, the warm fork server, the pipe bus its agent relays);
- ``nodeagent.survival``: what outlives an agent (its state directory, the
  lease its parts stop by, adoption by its next incarnation);
- ``nodeagent.job``: the job process itself, ``python -m nodeagent.job``: the
  sleep workload at the rate of the shared ``model.execution`` model, or the
  leader of an MPI-like part and its rank processes.

``python -m nodeagent`` is the command.
"""
