"""Node agents of the live runtime (one per machine); arrives with issue 4.

The execution model the agents' sleep workload will follow already lives in
``model.execution``, shared with the twin's modelled agents.
"""
