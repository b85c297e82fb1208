"""The limits of a shared cluster, per user and per request, and the file an admin sets them in.

Theory of operation. One user must not be able to deny the cluster to the
others (DESIGN.md, "Sharing is bounded"). Four limits, after Slurm's:

- ``max_queued_per_user``: jobs one user may have queued (Slurm's
  ``MaxSubmitJobs``). A job past it is refused (``queue_limit``); the rest of
  its request goes on.
- ``max_jobs_per_request``: jobs one ``SubmitJobs`` may carry. A larger request
  is refused as a whole (an ``ErrorReply`` of code ``too_many``), before any of
  it is read into the queue.
- ``max_user_cpus``: CPUs one user's running jobs may hold together (Slurm's
  ``GrpTRES=cpu``/``MaxTRESPerUser=cpu``). A job that would pass it *waits*;
  only one that asks for more than the limit alone is refused (``cpu_limit``).
  This one is a scheduling rule, applied in the sans-I/O core
  (``scheduler.core.user_limit``) so that the twin applies it alike.
- ``max_request_bytes``: the largest request payload. A larger one is answered
  with an ``ErrorReply`` of code ``too_large``. It may not exceed the wire's
  limit (``broker.limits.MAX_MESSAGE_BYTES``), which is its default: the broker
  drops anything larger unseen, so the two agree.

Every refusal names its limit and the value, and how to raise it.

Defaults (:data:`DEFAULTS`): 10,000 queued jobs per user and 10,000 jobs per
request keep one user's flood from growing the queue, the journal and every
status without bound, while the demo (60 jobs) and ``accordion replay``
(requests of at most 5,000 jobs, queued a little at a time) run untouched;
no per-user CPU limit (a testbed is often one user's); 16 MiB per request.
A replay that queues more than 10,000 jobs of one user at once (a whole
trace at a high compression, or without ``--wait``'s pace) needs a higher
``max_queued_per_user``, and its refusals say so.

The file (TOML, like the cluster file; one table, every key optional)::

    [limits]
    max_queued_per_user = 10000
    max_jobs_per_request = 10000
    max_user_cpus = 64          # absent: no limit
    max_request_bytes = 16777216

Read and checked once, when the scheduler starts (:func:`limits_from_toml`);
a mistake is one line naming the file, the key and what was wrong.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from broker.limits import MAX_MESSAGE_BYTES

#: The most jobs a request may be allowed: a ``SubmitReply`` of that many refusals
#: (about 400 bytes each at worst) must fit in one message of the wire.
MOST_JOBS_PER_REQUEST: Final = 20_000


class LimitsError(ValueError):
    """A limit that cannot be (one line: which, and why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The limits in force (see the module docstring); checked at construction."""

    max_queued_per_user: int = 10_000
    max_jobs_per_request: int = 10_000
    max_user_cpus: int | None = None
    max_request_bytes: int = MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        for name in ("max_queued_per_user", "max_jobs_per_request", "max_request_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LimitsError(f"{name} must be a whole number >= 1, not {value!r}")
        cpus = self.max_user_cpus
        if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1):
            raise LimitsError(f"max_user_cpus must be a whole number >= 1, not {cpus!r}")
        if self.max_jobs_per_request > MOST_JOBS_PER_REQUEST:
            raise LimitsError(
                f"max_jobs_per_request {self.max_jobs_per_request} is above "
                f"{MOST_JOBS_PER_REQUEST} (its reply must fit in one message)"
            )
        if self.max_request_bytes > MAX_MESSAGE_BYTES:
            raise LimitsError(
                f"max_request_bytes {self.max_request_bytes} is above the broker's message "
                f"limit {MAX_MESSAGE_BYTES} (broker.limits): larger requests never arrive"
            )

    def with_values(self, **values: int | None) -> Limits:
        """These limits with the given ones replaced (None: keep this one)."""
        given = {k: v for k, v in values.items() if v is not None}
        try:
            return replace(self, **given)
        except TypeError as exc:  # an unknown name: the caller's bug
            raise ValueError(str(exc)) from None


DEFAULTS: Final = Limits()
KEYS: Final = tuple(f.name for f in fields(Limits))


def limits_from_toml(text: str, source: str = "the limits file") -> Limits:
    """The limits of a file's text (module docstring); :class:`LimitsError` names what
    was wrong in one line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LimitsError(f"{source}: not TOML: {exc}") from None
    table: Any = data.get("limits")
    extra = sorted(set(data) - {"limits"})
    if extra:
        raise LimitsError(f"{source}: unknown table or key {extra[0]!r} (only [limits])")
    if table is None:
        return DEFAULTS
    if not isinstance(table, dict):
        raise LimitsError(f"{source}: [limits] must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise LimitsError(
            f"{source}: unknown key {unknown[0]!r} in [limits] (known: {', '.join(KEYS)})"
        )
    try:
        return Limits(**table)
    except LimitsError as exc:
        raise LimitsError(f"{source}: {exc}") from None


def raise_hint(name: str) -> str:
    """How an admin raises ``name`` (said in every refusal of it)."""
    return f"an admin raises it in the limits file or with --{name.replace('_', '-')}"
