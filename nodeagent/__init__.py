"""Node agents of the live runtime: one per machine.

- ``nodeagent.agent``: the actor (registration with a Last Will, heartbeats,
  admission of starts, resizes and cancels, its parts' runs, CPU pinning, its
  Prometheus metrics);
- ``nodeagent.launch``: how a part's process is started: the launch contract
  both sides agree on (``contract``: the launch, the exit codes, the part key,
  the job's side of the lease; ``frames``: the pipe's wire), the spawn
  strategies, the warm fork server, the relay of its bus;
- ``nodeagent.survival``: what outlives an agent (its state directory, the
  lease its parts stop by, adoption by its next incarnation);
- ``nodeagent.job``: the job process itself, ``python -m nodeagent.job``: the
  sleep workload at the rate of the shared ``model.execution`` model, or the
  leader of an MPI-like part and its rank processes, on a bus relayed by its
  agent that rejoins the agent's next incarnation. It imports nothing of the
  agent but the launch contract.

``python -m nodeagent`` is the command.
"""
