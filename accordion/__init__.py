"""The ``accordion`` command line: the twin's experiments, the live client and a local cluster."""
