"""``accordion``: replay traces through the twin, compare policies, run the live cluster.

The app and its commands, registered from the modules that hold them:

- the twin's, :mod:`accordion.twin_cmds`: ``simulate``, ``compare``, ``sweep``,
  ``generate``, ``policies``;
- the live runtime's client, :mod:`accordion.live_cmds`: ``submit``,
  ``status``, ``cancel``, ``replay``, ``watch``, ``scheduler``, ``agent``;
- a local cluster, :mod:`accordion.up_cmd`: ``up`` (``--demo`` to try it);
- logins and ACLs for a broker of one's own, :mod:`accordion.auth_cmd`: ``auth init``.
- the same demo on a cluster already running (the compose testbed),
  :mod:`accordion.demo_cmd`: ``demo``.

Every user error (unknown policy or option, missing file, bad trace, bad
cluster file, a broker or scheduler that cannot be reached) ends in one clear
line on stderr and exit status 2 (:mod:`accordion.errors`); a bug shows its
traceback. A request the scheduler refuses is printed with its reason and
exits 1.
"""

from __future__ import annotations

import typer

from accordion import auth_cmd, demo_cmd, live_cmds, twin_cmds, up_cmd

app = typer.Typer(
    name="accordion",
    help="Accordion: batch-scheduling policies on a discrete-event twin and a live cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
twin_cmds.register(app)
live_cmds.register(app)
up_cmd.register(app)
auth_cmd.register(app)
demo_cmd.register(app)


def main() -> None:
    app()


__all__ = ["app", "main"]
