"""Associations: which accounts a user may charge and the highest QoS they may ask for.

Theory of operation. A job names an account (``JobSpec.group``, ``accordion
submit -A``: fair-share charges its usage there) and a QoS (``-q``: the
multi-factor priority's QoS factor). Both are the submitter's word, so
without a rule anyone may charge anyone's account and buy the head of the
queue. Slurm's answer is the *association*: a user's accounts and the QoS
they may use. Here, a file the admin owns maps each user to the accounts
they may charge (the first is their default) and the highest QoS they may
ask for; the scheduler checks every job of a user's request against it
(:meth:`Associations.admit`):

- a user with no entry (and no ``[default]``) may submit nothing
  (``account``: "no association");
- a job that names no account (the wire's ``"nobody"``) is charged to the
  user's default account, its first;
- another account is refused (``account``), naming the ones they may charge;
- a QoS above the user's ``max_qos`` is refused (``qos``), naming it.

An admin's request is not checked: an admin may submit for anyone, with any
account and QoS. Without logins (an open broker) the user is whoever the
payload says: the table is then a rule of the house, not a defence. Without a
file, nothing is checked, as before.

The file (TOML)::

    [default]                 # optional: users without an entry of their own
    accounts = ["guests"]
    max_qos = 0

    [users.alice]
    accounts = ["physics", "chemistry"]   # the first is alice's default
    max_qos = 10

Read and checked once when the scheduler starts (:func:`associations_from_toml`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from broker.messages import JobSpec, charged_to
from broker.vocabulary import Rejection

#: The account of a job that names none (the wire's default ``group``).
NO_ACCOUNT: Final = "nobody"
#: The wire's highest QoS (``JobSpec.qos``).
MOST_QOS: Final = 1_000_000


class AssociationsError(ValueError):
    """A file that cannot be an association table (one line: where, and why)."""


@dataclass(frozen=True, slots=True)
class Association:
    """What one user may use: ``accounts`` (the first is the default) and ``max_qos``."""

    accounts: tuple[str, ...]
    max_qos: int = 0

    def __post_init__(self) -> None:
        if not self.accounts:
            raise AssociationsError("accounts is empty (a user needs at least one)")
        if not 0 <= self.max_qos <= MOST_QOS:
            raise AssociationsError(f"max_qos {self.max_qos} is not in 0..{MOST_QOS}")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A job the table refuses: the wire's code and the reason in words."""

    code: Rejection
    reason: str


@dataclass(frozen=True, slots=True)
class Associations:
    """The association table (see the module docstring)."""

    users: Mapping[str, Association]
    default: Association | None = None

    def of(self, user: str) -> Association | None:
        return self.users.get(user, self.default)

    def admit(self, spec: JobSpec) -> JobSpec | Refusal:
        """``spec`` as it may be accepted (its account defaulted), or why it may not."""
        assoc = self.of(spec.user)
        if assoc is None:
            return Refusal(
                Rejection.ACCOUNT,
                f"user {spec.user!r} has no association: an admin must give them accounts "
                "in the association file",
            )
        if spec.group == NO_ACCOUNT and NO_ACCOUNT not in assoc.accounts:
            spec = charged_to(spec, assoc.accounts[0])
        if spec.group not in assoc.accounts:
            return Refusal(
                Rejection.ACCOUNT,
                f"user {spec.user!r} may not charge account {spec.group!r} (their accounts: "
                f"{', '.join(assoc.accounts)})",
            )
        if spec.qos > assoc.max_qos:
            return Refusal(
                Rejection.QOS,
                f"user {spec.user!r} may ask for QoS up to {assoc.max_qos}, not {spec.qos}",
            )
        return spec


def associations_from_toml(text: str, source: str = "the association file") -> Associations:
    """The table of a file's text; :class:`AssociationsError` says what was wrong, in
    one line naming the file and the entry."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AssociationsError(f"{source}: not TOML: {exc}") from None
    extra = sorted(set(data) - {"default", "users"})
    if extra:
        raise AssociationsError(f"{source}: unknown table {extra[0]!r} (only [default], [users])")
    users: Any = data.get("users", {})
    if not isinstance(users, dict):
        raise AssociationsError(f"{source}: [users] must be a table of users")
    table = {name: _entry(entry, f"{source}: [users.{name}]") for name, entry in users.items()}
    default = None
    if "default" in data:
        default = _entry(data["default"], f"{source}: [default]")
    return Associations(table, default)


def _entry(entry: Any, where: str) -> Association:
    if not isinstance(entry, dict):
        raise AssociationsError(f"{where} must be a table (accounts = [...], max_qos = N)")
    unknown = sorted(set(entry) - {"accounts", "max_qos"})
    if unknown:
        raise AssociationsError(f"{where}: unknown key {unknown[0]!r} (accounts, max_qos)")
    accounts = entry.get("accounts")
    if not isinstance(accounts, list) or not all(isinstance(a, str) and a for a in accounts):
        raise AssociationsError(f"{where}: accounts must be a list of account names")
    qos = entry.get("max_qos", 0)
    if isinstance(qos, bool) or not isinstance(qos, int):
        raise AssociationsError(f"{where}: max_qos must be a whole number, not {qos!r}")
    try:
        return Association(tuple(accounts), qos)
    except AssociationsError as exc:
        raise AssociationsError(f"{where}: {exc}") from None
