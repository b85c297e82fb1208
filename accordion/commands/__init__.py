"""The ``accordion`` commands: each module one group of typer commands, and their shared options."""
