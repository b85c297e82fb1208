"""The central scheduler: a sans-I/O core, its policies, and (later) the actor around it.

``scheduler.core`` is a state machine (events in, commands out) that both the
discrete-event twin and the live scheduler actor drive; ``scheduler.policies``
holds one module per policy, each citing its paper.
"""
