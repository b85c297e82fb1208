"""The discrete-event twin: the scheduler core on a virtual clock with modelled agents.

It replays a workload (a Parallel Workloads Archive trace, a generated one)
against modelled machines in seconds, through the very ``SchedulerCore`` and
policy objects the live scheduler runs; job progress comes from the shared
execution model (``model.execution``), the same one the live agents' sleep
workload follows.
"""
