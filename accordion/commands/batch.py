"""``accordion batch SCRIPT [ARGS...]``: a batch script as a job, as ``sbatch`` submits one.

The script's ``#ACCORDION`` lines are read the way ``sbatch`` reads
``#SBATCH`` lines (``accordion.client.command_jobs.directives``: before the
first command, each split as a shell would), and each is parsed by this very
command's options, so a directive means what the option means on the
command line and a bad one is refused with its line number. An option given
on the command line wins over the script's; a later directive over an earlier
one. Options stop at the script, as ``sbatch``'s do: what follows it is the
script's arguments.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from typer.exceptions import TyperException

from accordion.client.command_jobs import Directive, command_spec, directives, read_script
from accordion.client.live_client import DEFAULT_BROKER, DEFAULT_TIMEOUT
from accordion.client.specs import job_spec, parse_duration
from accordion.commands.live import send_one
from accordion.commands.options import (
    DURATIONS,
    BrokerOpt,
    ChdirOpt,
    ErrorOpt,
    JobNameOpt,
    MpiOpt,
    OutputOpt,
    RootOpt,
    TimeoutOpt,
    login_name,
)
from accordion.errors import UserError, user_errors
from broker.topics import DEFAULT_ROOT

#: The options a ``#ACCORDION`` line may set: the job's, not the client's connection.
JOB_OPTIONS = frozenset(
    {
        "procs",
        "walltime",
        "user",
        "account",
        "qos",
        "deadline",
        "rigid",
        "chdir",
        "output",
        "error",
        "job_name",
        "mpi_library",
    }
)


def batch(  # noqa: PLR0917 (typer reads the options from the parameters)
    ctx: typer.Context,
    script: Annotated[
        Path,
        typer.Argument(help="the batch script (it starts with #!; #ACCORDION lines set options)"),
    ],
    args: Annotated[
        list[str] | None,
        typer.Argument(help="the script's arguments", show_default=False),
    ] = None,
    procs: Annotated[int, typer.Option("--procs", "-n", min=1, help="processes")] = 1,
    walltime: Annotated[
        str, typer.Option("--walltime", "-t", help=f"the wall-time limit: {DURATIONS}")
    ] = "600",
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="the job's user (default: your login)")
    ] = None,
    account: Annotated[
        str, typer.Option("--account", "-A", help="account (group, for fair-share)")
    ] = "nobody",
    qos: Annotated[int, typer.Option("--qos", "-q", min=0, help="QoS level")] = 0,
    deadline: Annotated[
        str | None, typer.Option("--deadline", help=f"after the submission: {DURATIONS}")
    ] = None,
    rigid: Annotated[bool, typer.Option("--rigid", help="never run shrunk")] = False,
    chdir: ChdirOpt = None,
    output: OutputOpt = None,
    error: ErrorOpt = None,
    job_name: JobNameOpt = None,
    mpi_library: MpiOpt = None,
    job_id: Annotated[
        str | None, typer.Option("--id", help="your job id (default: a uuid)")
    ] = None,
    parsable: Annotated[bool, typer.Option("--parsable", help="print only the job id")] = False,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Submit a batch script; print its id, or the scheduler's reason for rejecting it (exit 1).

    The script runs on the job's first part, in --chdir (this directory by default),
    its stdout and stderr in accordion-%j.out there unless --output/--error say.
    """
    with user_errors():
        text = read_script(script)
        given = merged(ctx, directives(text, where=str(script)), script)
        own = command_spec(
            argv=tuple(args or ()),
            script=text,
            chdir=given["chdir"],
            output=given["output"],
            error=given["error"],
            name=given["job_name"],
            script_name=script.name,
            mpi=given["mpi_library"],
        )
        deadline_text = given["deadline"]
        spec = job_spec(
            job_id=job_id or str(uuid.uuid4()),
            procs=given["procs"],
            walltime=parse_duration(given["walltime"], what="--walltime"),
            workload="command",
            user=given["user"] or login_name(),
            account=given["account"],
            qos=given["qos"],
            deadline=None
            if deadline_text is None
            else parse_duration(deadline_text, what="--deadline"),
            malleable=not given["rigid"],
            command=own,
        )
    send_one(spec, broker=broker, root=root, timeout=timeout, parsable=parsable)


def merged(ctx: typer.Context, lines: list[Directive], script: Path) -> dict[str, Any]:
    """The job options: the command line's, else the last directive's, else the default."""
    from_script: dict[str, Any] = {}
    for line in lines:
        if any(t in ("--help", "-h") for t in line.tokens):
            raise UserError(f"{script}, line {line.line}: --help is not a job option")
        try:
            sub = ctx.command.make_context(
                ctx.info_name, [*line.tokens, str(script)], parent=ctx.parent
            )
        except TyperException as exc:  # the parser's usage errors
            raise UserError(f"{script}, line {line.line}: {exc.format_message()}") from None
        for name in sub.params:
            if name in ("script", "args") or _source(sub, name) != "COMMANDLINE":
                continue
            if name not in JOB_OPTIONS:
                raise UserError(
                    f"{script}, line {line.line}: --{name.replace('_', '-')} is not a job option "
                    "(a directive sets the job's options, not the client's)"
                )
            from_script[name] = sub.params[name]
    values: dict[str, Any] = {}
    for name in JOB_OPTIONS:
        if _source(ctx, name) in ("COMMANDLINE", "ENVIRONMENT"):
            values[name] = ctx.params[name]
        else:
            values[name] = from_script.get(name, ctx.params[name])
    return values


class _Parsed(Protocol):
    def get_parameter_source(self, name: str) -> Any: ...


def _source(ctx: _Parsed, name: str) -> str:
    """Where a parameter's value came from (``COMMANDLINE``, ``DEFAULT`` ...), by name:
    typer bundles the parser whose enum says it."""
    source = ctx.get_parameter_source(name)
    return "DEFAULT" if source is None else source.name


def register(app: typer.Typer) -> None:
    # Options stop at the script, as sbatch's do: what follows it is the script's.
    app.command(context_settings={"allow_interspersed_args": False})(batch)
