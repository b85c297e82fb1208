"""What counts as the user's mistake, and how the commands report it.

A user error is raised at the edge, where input is read (a flag, a file, a
cluster file, a broker URL), as :class:`UserError` or one of the input types
listed in :data:`USER_ERRORS`. The commands print it as one ``error:`` line and
exit with status 2. Anything else, a bare ``ValueError`` raised inside a policy
included, is a bug and shows its traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer

from accordion.display import err_console
from broker.bus import BusError
from broker.topics import TopicError
from model.job import JobError
from model.machine import MachineError
from scheduler.policies.registry import PolicyOptionError, UnknownPolicyError
from workload.cluster import ClusterError
from workload.swf import SwfError
from workload.swf_load import TraceOrderError

T = TypeVar("T")


class UserError(Exception):
    """Input the user can fix: the message says what was wrong."""


class LiveError(UserError):
    """A request the scheduler did not answer as asked."""


class NoReplyError(LiveError):
    """No reply within the timeout (scheduler down, another broker or topic root)."""


class RefusedError(LiveError):
    """The scheduler answered with an ``ErrorReply``; ``code`` is its refusal code
    (``broker.vocabulary.BadMessage``'s value), for a client that branches on it."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


USER_ERRORS: tuple[type[Exception], ...] = (
    UserError,
    SwfError,
    TraceOrderError,
    ClusterError,
    UnknownPolicyError,
    PolicyOptionError,
    TopicError,
    JobError,
    MachineError,
    FileNotFoundError,
    IsADirectoryError,
    PermissionError,
    BusError,
)


def parsed(parse: Callable[[], T], what: str) -> T:
    """``parse()``, its ``ValueError`` turned into a :class:`UserError` about ``what``.

    For parsers of user input that live in packages whose ``ValueError`` also
    guards their callers' bugs (a URL, a walltime fallback, a deadline rule).
    """
    try:
        return parse()
    except ValueError as exc:
        raise UserError(f"{what}: {exc}") from exc


@contextmanager
def user_errors() -> Iterator[None]:
    """Print a user error as one line and exit 2; let anything else through."""
    try:
        yield
    except USER_ERRORS as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc


def refused(text: str) -> typer.Exit:
    """The scheduler (or the demo) said no: the reason on stderr, exit status 1."""
    err_console.print(f"[bold red]error:[/] {text}", highlight=False, soft_wrap=True)
    return typer.Exit(1)
