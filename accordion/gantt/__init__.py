"""The Gantt chart: which job ran where and when, and what the plan says comes next."""
