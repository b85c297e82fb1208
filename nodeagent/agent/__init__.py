"""The node agent actor: admission of commands, its parts' runs, its CPUs, reports and metrics."""
