"""The documentation site's generated reference pages, rebuilt from the code.

Each module renders one kind of reference from the objects the runtime uses,
so a change to the code changes the page by regenerating, not by editing:

- :mod:`docgen.cli`: the CLI reference, from the typer app (and the
  ``--help`` of the modules ``accordion scheduler`` and ``agent`` run);
- :mod:`docgen.metrics`: every Prometheus metric of the scheduler and the
  agents, from their collectors;
- :mod:`docgen.wire`: the wire contract's AsyncAPI document (YAML and JSON,
  from :mod:`broker.asyncapi`) and its page.

``python -m docgen`` writes them all under ``docs/reference/``;
``python -m docgen --check`` says which committed file is stale (exit 1).
The tests in ``tests/docgen/`` run the same check.
"""
