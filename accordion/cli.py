"""``accordion``: replay traces through the twin, compare policies, run the live cluster.

The app and its commands, registered from the modules that hold them:

- the twin's, :mod:`accordion.commands.twin`: ``simulate``, ``compare``, ``sweep``,
  ``generate``, ``policies``;
- the live runtime's client, :mod:`accordion.commands.live`: ``submit``,
  ``status``, ``cancel``, ``replay``, ``watch``, ``scheduler``, ``agent``;
- an admin's operations, :mod:`accordion.commands.operate`: ``drain``, ``resume``;
- a local cluster, :mod:`accordion.commands.up`: ``up`` (``--demo`` to try it);
- logins and ACLs for a broker of one's own, :mod:`accordion.commands.auth`: ``auth init``.
- the same demo on a cluster already running (the compose testbed),
  :mod:`accordion.commands.demo`: ``demo``;
- the schedule as a picture, from a twin run or a live cluster,
  :mod:`accordion.commands.gantt`: ``gantt``;
- a web page of the live cluster, :mod:`accordion.commands.ui`: ``ui``.

Every user error (unknown policy or option, missing file, bad trace, bad
cluster file, a broker or scheduler that cannot be reached) ends in one clear
line on stderr and exit status 2 (:mod:`accordion.errors`); a bug shows its
traceback. A request the scheduler refuses is printed with its reason and
exits 1.
"""

from __future__ import annotations

import typer

from accordion.commands import auth, demo, gantt, live, operate, twin, ui, up

app = typer.Typer(
    name="accordion",
    help="Accordion: batch-scheduling policies on a discrete-event twin and a live cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
twin.register(app)
live.register(app)
operate.register(app)
up.register(app)
auth.register(app)
demo.register(app)
gantt.register(app)
ui.register(app)


def main() -> None:
    app()


__all__ = ["app", "main"]
