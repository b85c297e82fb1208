"""The job process (``python -m nodeagent.job``): the sleep workload and the MPI-like ranks."""
