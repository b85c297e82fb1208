"""Job processes relayed over their agent's logins, for a broker with logins and ACLs.

A job process holds no credentials: it speaks over its stdin/stdout
(``nodeagent.pipe``) and its agent opens the MQTT connection that carries its
bus. With ``use_username_as_clientid`` a login is one connection at a time,
so the agent cannot open one connection per job process under its own login.
It has a pool of relay logins instead, ``agent-<m>~j1`` ... ``~jN``
(:func:`broker.auth.relay_accounts`: the agent's role, identity and
password), and each relayed job process borrows one for its life. ``N`` is
twice the machine's CPUs: a part takes at least one CPU, and a part being
stopped may still hold its login while its successor starts.

This is the stopgap until job processes are multiplexed over the agent's one
connection: the relay logins have exactly the agent's rights, nothing more,
and live in the agent's process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from broker.bus import Bus, BusError
from broker.mqtt import MqttBus, MqttSettings


def relay_login(agent_login: str, n: int) -> str:
    """The ``n``-th relay login of the agent logged in as ``agent_login`` (from 1)."""
    return f"{agent_login}~j{n}"


class RelayLogins:
    """Borrows one of ``size`` relay logins per relayed job process (see the module)."""

    def __init__(self, settings: MqttSettings, size: int) -> None:
        if settings.username is None:
            raise ValueError("relay logins need the agent's own login")
        if size < 1:
            raise ValueError(f"a pool of relay logins needs a size >= 1, not {size}")
        self._settings = settings
        self._free = [relay_login(settings.username, n) for n in range(size, 0, -1)]

    @property
    def free(self) -> int:
        return len(self._free)

    @asynccontextmanager
    async def connect(self, client_id: str) -> AsyncIterator[Bus]:
        """A bus for one job process (``client_id`` is ignored: the login is the id)."""
        if not self._free:
            raise BusError(f"all relay logins of {self._settings.username} are in use")
        login = self._free.pop()
        try:
            async with MqttBus(replace(self._settings, username=login), login) as bus:
                yield bus
        finally:
            self._free.append(login)
