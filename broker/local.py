"""Running an MQTT broker process on this machine: Mosquitto's settings and readiness.

``accordion up`` and the integration tests' fixture both start Mosquitto with
a generated configuration; the settings the runtime depends on live here once,
so the broker the tests exercise is the broker users get.
"""

from __future__ import annotations

import secrets
import shutil
import socket
from collections.abc import Collection
from pathlib import Path
from typing import Final

from broker.auth import AuthFiles, mosquitto_auth_config
from broker.limits import MAX_MESSAGE_BYTES, MAX_PACKET_BYTES

#: The wire's size bounds (``broker.limits``) as Mosquitto's options, in every
#: configuration we generate (``deploy/mosquitto.conf`` holds the same lines, a test
#: checks): a larger payload is dropped unseen (its QoS flow completed), and a
#: client whose packet is larger still is disconnected once its header is read.
BOUNDS: Final = f"""\
message_size_limit {MAX_MESSAGE_BYTES}
max_packet_size {MAX_PACKET_BYTES}
"""

# Mosquitto 2.0 option names, checked against mosquitto.conf(5) of 2.0.11.
_MOSQUITTO_CONF: Final = (
    """\
listener {port} {host}
# Nagle's algorithm plus delayed ACKs add 40 ms to every small QoS 1 message.
set_tcp_nodelay true
# The default 1000 silently drops QoS 1 messages queued for a slow or offline
# persistent session; 0 is unlimited. max_inflight_messages stays at its
# default (20): past it messages wait in that unlimited queue, none is lost.
max_queued_messages 0
"""
    + BOUNDS
    + """\
persistence false
log_dest stderr
log_type error
log_type warning
log_type notice
"""
)
_VERBOSE: Final = "log_type information\nconnection_messages true\n"
_QUIET: Final = "connection_messages false\n"


_ANONYMOUS: Final = "allow_anonymous true\n"


def mosquitto_config(
    *, host: str, port: int, verbose: bool = False, auth: AuthFiles | None = None
) -> str:
    """A ``mosquitto.conf`` listening on ``host:port``; ``verbose`` logs connections.

    Without ``auth`` anyone may connect and do anything (a trusted machine);
    with it, only its logins, each as its ACL says (``broker.auth``).
    """
    access = _ANONYMOUS if auth is None else mosquitto_auth_config(auth)
    text = _MOSQUITTO_CONF.format(host=host, port=port) + access
    return text + (_VERBOSE if verbose else _QUIET)


def mosquitto_binary() -> str | None:
    """The ``mosquitto`` executable, or None when it is not installed."""
    # /usr/sbin is not on every user's PATH; Debian installs mosquitto there.
    return shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")


def free_port(host: str = "127.0.0.1", avoid: Collection[int] = ()) -> int:
    """A port nothing listens on now (the caller's child binds it a moment later).

    ``avoid``: ports the caller handed out already whose children may not have bound
    them yet (a cluster picks a port per process before any of them starts).

    Drawn below the kernel's ephemeral range: a port the kernel hands out for
    ``bind(0)`` is also the source port of the next outgoing connection (every
    MQTT client of a cluster opens some), which could take it before the child
    binds it ("Address already in use"). Below the range only another caller of
    this function can.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = secrets.randbelow(low - _FIRST) + _FIRST
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    # Crowded: fall back to the kernel's choice.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        chosen: int = s.getsockname()[1]
        return chosen


_FIRST = 10_000


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low = int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > _FIRST + 1000 else 32768


def accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
