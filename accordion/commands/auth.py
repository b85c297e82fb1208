"""``accordion auth init DIR``: a cluster's logins for a Mosquitto of one's own (compose, deploy).

Writes what ``accordion up --auth`` generates for itself, for a broker and
processes started some other way: Mosquitto's ``passwd`` (``$7$`` hashes)
and ``acl`` files, and per login ``secrets/<login>`` (its password) and
``secrets/<login>.env`` (``ACCORDION_MQTT_USERNAME``,
``ACCORDION_MQTT_PASSWORD_FILE`` and ``ACCORDION_ROLE``: a path, never the
secret). Every file is mode 0600. Job processes get no login: their agent
relays them over its own connection (``nodeagent.launch.relay``). Passwords are
random and never printed; the
command lists which file belongs to which login. Mosquitto also needs the
lines of ``mosquitto.conf`` that :func:`broker.auth.mosquitto_auth_config`
writes (``--conf`` prints them to a file); the password and ACL paths in them
are the ones the broker sees, ``--mount`` when it runs in a container.

``--compose`` writes the compose testbed's layout instead
(:func:`broker.auth.write_compose_auth`): one shared agent login whose ACL is
by client id, the scheduler's, and the users' and admins' logins for the
user-facing listener, each file in the directory of the one container that
reads it (``broker/``, ``scheduler/``, ``agent/``, ``users/``). It keeps
files that exist, so the testbed's init step generates them once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accordion.commands.options import RootOpt
from accordion.display import out_console
from accordion.errors import UserError, user_errors
from broker.auth import (
    AuthError,
    cluster_accounts,
    compose_accounts,
    write_auth_files,
    write_compose_auth,
)
from broker.topics import DEFAULT_ROOT, TopicError, Topics

auth_app = typer.Typer(
    name="auth",
    help="Logins and ACLs for a Mosquitto broker (password, ACL and per-login files).",
    no_args_is_help=True,
)


@auth_app.command("init")
def init(  # noqa: PLR0917 (typer reads the options from the parameters)
    directory: Annotated[Path, typer.Argument(help="where to write the files (created)")],
    agents: Annotated[
        list[str] | None, typer.Option("--agent", help="an agent's machine id (repeatable)")
    ] = None,
    users: Annotated[list[str] | None, typer.Option("--user", help="a user (repeatable)")] = None,
    admins: Annotated[
        list[str] | None, typer.Option("--admin", help="an admin (repeatable)")
    ] = None,
    root: RootOpt = DEFAULT_ROOT,
    logins: Annotated[
        int, typer.Option("--logins", min=1, help="logins per user and admin (one per client)")
    ] = 2,
    mount: Annotated[
        Path | None,
        typer.Option("--mount", help="where the broker sees DIRECTORY (default: DIRECTORY)"),
    ] = None,
    compose: Annotated[
        bool,
        typer.Option(
            "--compose",
            help="the compose testbed's layout (shared agent login, two listeners); "
            "existing files are kept",
        ),
    ] = False,
    broker_uid: Annotated[
        int, typer.Option("--broker-uid", help="--compose as root: owner of the broker's files")
    ] = 1883,
    client_uid: Annotated[
        int, typer.Option("--client-uid", help="--compose as root: owner of the secrets")
    ] = 10001,
) -> None:
    """Write a cluster's password, ACL and per-login files (secrets never printed)."""
    if compose:
        _compose(directory, users or [], admins or [], root, logins, broker_uid, client_uid)
        return
    with user_errors():
        try:
            accounts = cluster_accounts(
                agents or [],
                users or [],
                admins or [],
                logins=logins,
            )
            files = write_auth_files(directory, accounts, Topics(root))
        except (AuthError, TopicError) as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:
            raise UserError(f"cannot write {directory}: {exc.strerror}") from None
    seen = mount if mount is not None else directory.resolve()
    conf = directory / "mosquitto-auth.conf"
    # The lines Mosquitto needs, with the paths as the broker sees them.
    conf.write_text(
        "allow_anonymous false\n"
        f"password_file {seen / files.password_file.name}\n"
        f"acl_file {seen / files.acl_file.name}\n"
        "use_username_as_clientid true\n"
    )
    out_console.print(f"mosquitto.conf lines: {conf}", highlight=False)
    for account in accounts:
        out_console.print(
            f"{account.role:9} {account.identity:16} login {account.login:20} "
            f"env {files.env_files[account.login]}",
            highlight=False,
        )


def _compose(  # noqa: PLR0917
    directory: Path,
    users: list[str],
    admins: list[str],
    root: str,
    logins: int,
    broker_uid: int,
    client_uid: int,
) -> None:
    with user_errors():
        try:
            accounts = compose_accounts(users, admins, logins=logins)
            files = write_compose_auth(
                directory,
                accounts,
                Topics(root),
                broker_owner=broker_uid,
                client_owner=client_uid,
            )
        except (AuthError, TopicError) as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:
            raise UserError(f"cannot write {directory}: {exc.strerror}") from None
    if not files.created:
        out_console.print(f"kept the logins already in {directory}", highlight=False)
        return
    for account in accounts:
        out_console.print(
            f"{account.role:9} {account.identity:16} login {account.login:20} "
            f"secret {files.secret_of(account.login)}",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    app.add_typer(auth_app)
