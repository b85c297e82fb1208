"""The live scheduler's I/O shell: the actor, its journal, its clock and its metrics exporter."""
