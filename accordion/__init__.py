"""The ``accordion`` command line: it drives the twin (and, later, the live runtime)."""
