"""Who a command job runs as: the agent's own account, or the admin's map of owners.

The rule (``docs/guide/commands.md`` states it against Slurm's):

- an agent **not running as root** runs every command as itself (it cannot be
  anyone else), and says so in its registration (``AgentOnline.commands ==
  "agent"``, ``runs_as``);
- an agent **running as root** runs a command as the OS account that its
  admin's *user map* gives the job's authenticated owner (``JobSpec.owner``:
  the broker login the scheduler saw). No authenticated owner, no entry, or an
  account this host does not have: the part is refused with the reason, and
  the job fails with it.

The user map is a text file the admin writes, one ``LOGIN ACCOUNT`` pair per
line (``#`` starts a comment)::

    alice   alice
    carol   projects-c     # several logins may share one account
    *       *              # any other login: the account of the same name

The ``* *`` line maps a login to the account of its own name, except ``root``
(uid 0): root is reached only by a line that names it. The file must belong to
root (or to the agent's own user) and be writable by nobody else, since whoever
may write it may run anything as anyone; it is read again when it changes, and
a file that does not read refuses every command (with the reason) until it
does.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

from nodeagent.launch.command_plan import RunAs

_NAME = re.compile(r"^[^\s#]{1,128}$")
WILDCARD = "*"


class CommandRefusedError(Exception):
    """A command part this agent will not run; the message says why (to the user)."""


class UserMapError(ValueError):
    """A user map that cannot be read."""


@dataclass(frozen=True, slots=True)
class UserMap:
    """Logins to OS account names; ``same_name``: the ``* *`` line is there."""

    entries: dict[str, str]
    same_name: bool = False

    def account(self, login: str) -> str | None:
        """The account ``login`` maps to (None: no entry)."""
        if login in self.entries:
            return self.entries[login]
        return login if self.same_name else None

    def explicit(self, login: str) -> bool:
        """Whether a line of its own names ``login`` (so it may map to root)."""
        return login in self.entries

    @classmethod
    def parse(cls, text: str, *, where: str = "user map") -> UserMap:
        entries: dict[str, str] = {}
        same_name = False
        for number, line in enumerate(text.splitlines(), 1):
            body = line.split("#", 1)[0].strip()
            if not body:
                continue
            fields = body.split()
            if len(fields) != 2 or not all(_NAME.match(f) for f in fields):
                raise UserMapError(
                    f"{where}, line {number}: expected 'LOGIN ACCOUNT', got {line!r}"
                )
            login, account = fields
            if (login == WILDCARD) != (account == WILDCARD):
                raise UserMapError(f"{where}, line {number}: '*' maps only to '*' (same name)")
            if login == WILDCARD:
                same_name = True
                continue
            if login in entries:
                raise UserMapError(f"{where}, line {number}: {login!r} is mapped twice")
            entries[login] = account
        return cls(entries, same_name)


class UserMapFile:
    """The admin's map as a file, read again whenever it changes (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None
        self._map: UserMap | None = None
        self._error: str | None = None
        self.load()

    def load(self) -> UserMap:
        """The map as the file says now; UserMapError if it cannot be trusted or read."""
        try:
            st = self.path.stat()
        except OSError as exc:
            raise UserMapError(f"user map {self.path}: {exc.strerror}") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            if self._map is None:
                raise UserMapError(self._error or f"user map {self.path} cannot be read")
            return self._map
        self._seen, self._map, self._error = stamp, None, None
        try:
            if st.st_uid not in (0, os.geteuid()):
                raise UserMapError(
                    f"user map {self.path} belongs to uid {st.st_uid}: it must be root's "
                    "or this agent's (whoever may write it may run anything as anyone)"
                )
            if st.st_mode & 0o022:
                raise UserMapError(
                    f"user map {self.path} is writable by others (mode {st.st_mode & 0o777:o})"
                )
            text = self.path.read_text(encoding="utf-8")
            self._map = UserMap.parse(text, where=f"user map {self.path}")
        except UserMapError as exc:
            self._error = str(exc)
            raise
        except (OSError, UnicodeDecodeError) as exc:
            self._error = f"user map {self.path}: {exc}"
            raise UserMapError(self._error) from None
        return self._map


def account_of(uid: int) -> RunAs:
    """The OS account ``uid`` as a :class:`RunAs`."""
    entry = pwd.getpwuid(uid)
    return _run_as(entry)


def _run_as(entry: pwd.struct_passwd) -> RunAs:
    return RunAs(
        user=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)))),
        home=entry.pw_dir,
        shell=entry.pw_shell or "/bin/sh",
    )


def mapped_account(owner: str | None, user_map: UserMapFile) -> RunAs:
    """The account a root agent runs ``owner``'s command as; CommandRefusedError if none."""
    if owner is None:
        raise CommandRefusedError(
            "the job has no authenticated owner (it was submitted without a broker login), "
            "and this agent runs as root: it runs commands only for owners its admin mapped"
        )
    try:
        mapping = user_map.load()
    except UserMapError as exc:
        raise CommandRefusedError(f"this agent's user map cannot be used: {exc}") from None
    account = mapping.account(owner)
    if account is None:
        raise CommandRefusedError(
            f"no OS account is mapped for {owner!r} on this agent (its admin's user map "
            f"{user_map.path} has no entry)"
        )
    try:
        entry = pwd.getpwnam(account)
    except KeyError:
        raise CommandRefusedError(
            f"the OS account {account!r} mapped for {owner!r} does not exist on this host"
        ) from None
    if entry.pw_uid == 0 and not mapping.explicit(owner):
        raise CommandRefusedError(
            f"{owner!r} would run as root only through the map's '* *' line: root needs a "
            "line of its own"
        )
    return _run_as(entry)
