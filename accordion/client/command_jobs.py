"""Users' own commands as jobs: ``submit -- CMD ARGS...``, batch scripts and their directives.

``accordion submit`` and ``accordion batch`` build a command job's
``CommandSpec`` here (:func:`command_spec`): the program and its arguments, or
a batch script's text; the working directory (the client's own by default,
as ``sbatch``'s); the stdout and stderr patterns (``accordion-%j.out`` in it
by default); the job's name (the program's or the script's file name by
default). The spec makes the scheduler's round trip, so a bad one is refused
before anything is sent.

A batch script's options are read the way ``sbatch`` reads ``#SBATCH``
lines (:func:`directives`): lines that start with ``#ACCORDION``, before the
first line that is neither blank nor a comment, each split as a shell would
(quotes work); a ``#ACCORDION`` line after the first command is ignored,
as ``sbatch`` ignores it. The script must start with ``#!``: the agent execs
it. Options on the command line win over the script's.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accordion.errors import UserError
from broker.codec import WireError, decode, encode
from broker.command_spec import DEFAULT_OUTPUT, MAX_SCRIPT, CommandSpec
from broker.messages import JobEvent, JobSpec, SubmitJobs
from broker.vocabulary import MpiLibrary
from nodeagent.launch.command_plan import signal_name

DIRECTIVE = "#ACCORDION"


@dataclass(frozen=True, slots=True)
class Directive:
    """One ``#ACCORDION`` line: its number in the script and its options, split."""

    line: int
    tokens: tuple[str, ...]


def read_script(path: Path) -> str:
    """A batch script's text; UserError if it cannot be one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror}") from None
    if len(data) > MAX_SCRIPT:
        raise UserError(f"{path}: a batch script is at most {MAX_SCRIPT:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: a batch script must be UTF-8 text") from None
    if not text.startswith("#!"):
        raise UserError(f"{path}: a batch script must start with a #! line (the agent execs it)")
    return text


def directives(text: str, *, where: str = "script") -> list[Directive]:
    """The script's ``#ACCORDION`` lines before its first command (module docstring)."""
    found: list[Directive] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # the first command: sbatch reads no directive past it
        if not stripped.startswith(DIRECTIVE):
            continue
        rest = stripped[len(DIRECTIVE) :]
        if rest and not rest[0].isspace():
            continue  # "#ACCORDIONX": a comment, not a directive
        try:
            tokens = tuple(shlex.split(rest, comments=True))
        except ValueError as exc:
            raise UserError(f"{where}, line {number}: {exc}") from None
        if tokens:
            found.append(Directive(number, tokens))
    return found


def command_spec(
    *,
    argv: Sequence[str] = (),
    script: str | None = None,
    chdir: str | None = None,
    output: str | None = None,
    error: str | None = None,
    name: str | None = None,
    script_name: str | None = None,
    mpi: MpiLibrary | None = None,
) -> CommandSpec:
    """A command job's spec (module docstring); UserError with the reason if it is bad."""
    where = os.path.abspath(chdir) if chdir is not None else os.getcwd()
    if name is None:
        source = (script_name or "") if script is not None else (argv[0] if argv else "")
        name = os.path.basename(source) or "command"
    try:
        spec = CommandSpec(
            argv=tuple(argv),
            script=script,
            chdir=where,
            output=output or DEFAULT_OUTPUT,
            error=error,
            name=name,
            mpi=mpi,
        )
        probe = JobSpec(id="-probe-", procs=1, walltime=1, work=1, workload="command", command=spec)
        decode(encode(SubmitJobs(jobs=(probe,))))
    except (ValueError, WireError) as exc:
        why = str(exc).removeprefix("invalid message: ").replace("$.jobs[0].command.", "")
        raise UserError(f"the command: {why}") from None
    return spec


def describe_end(event: JobEvent) -> str:
    """A command job's end as a watcher reads it: ``exit 0``, ``exit 3``,
    ``signal 9 (SIGKILL)``; empty when the event says none."""
    if event.signal is not None:
        return f"signal {event.signal} ({signal_name(event.signal)})"
    if event.exit_status is not None:
        return f"exit {event.exit_status}"
    return ""
