"""Where an MQTT broker is and how to log in: :class:`MqttSettings`, from a URL or the environment.

``mqtt[s]://[user[:password]@]host[:port][?ca=F&cert=F&key=F]``; what the URL
does not give may come from ``ACCORDION_MQTT_*`` variables or a password file.
The password is never part of a repr, a URL shown, or an error message
(:func:`redact_url`). ``broker.mqtt`` turns these settings into a connection;
this module imports no MQTT library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

MqttProtocol = Literal["3.1.1", "5"]
PROTOCOLS: Final[tuple[MqttProtocol, ...]] = ("3.1.1", "5")
_SCHEMES = {"mqtt": 1883, "mqtts": 8883}
_TLS_QUERY = {"ca": "ca_file", "cert": "cert_file", "key": "key_file"}

#: Environment variables read by :meth:`MqttSettings.from_url` and
#: :meth:`MqttSettings.with_env` where the URL or the caller gives nothing.
ENV_USERNAME = "ACCORDION_MQTT_USERNAME"
ENV_PASSWORD = "ACCORDION_MQTT_PASSWORD"  # a variable's name, not a secret
ENV_PASSWORD_FILE = "ACCORDION_MQTT_PASSWORD_FILE"
ENV_CA = "ACCORDION_MQTT_CA"
ENV_CERT = "ACCORDION_MQTT_CERT"
ENV_KEY = "ACCORDION_MQTT_KEY"
#: ``1`` turns TLS on for a process given only ``--host/--port`` (the scheduler, an agent).
ENV_TLS = "ACCORDION_MQTT_TLS"
#: The login an agent's probe logs in as (``nodeagent.survival.incarnation``: it looks at
#: the machine's topics before the agent connects as the machine); default: the agent's.
ENV_PROBE_USERNAME = "ACCORDION_MQTT_PROBE_USERNAME"


@dataclass(frozen=True, slots=True)
class MqttSettings:
    """Where the broker is and how to talk to it.

    ``keepalive`` (seconds) bounds how long a silent, half-open connection
    goes unnoticed: the broker publishes the will after 1.5 times it (a killed
    process is noticed at once, its socket closes). ``connect_timeout`` bounds
    the wait for the broker's CONNACK, ``ack_timeout`` the wait for a PUBACK or
    SUBACK, ``publish_timeout`` the wait for a connection while reconnecting.

    ``username``/``password`` authenticate; ``tls`` (``mqtts://``) verifies the
    broker against ``ca_file`` (else the system's CAs) and presents
    ``cert_file``/``key_file`` when given. The password is not in the repr.
    """

    host: str = "127.0.0.1"
    port: int = 1883
    protocol: MqttProtocol = "3.1.1"
    keepalive: int = 15
    connect_timeout: float = 10.0
    ack_timeout: float = 10.0
    publish_timeout: float = 60.0
    reconnect_min: float = 0.05
    reconnect_max: float = 2.0
    subscribe_attempts: int = 3
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("MQTT host is empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"MQTT port {self.port} is not in 1..65535")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"MQTT protocol {self.protocol!r} is not one of 3.1.1, 5")
        if not 1 <= self.keepalive <= 65535:
            raise ValueError(f"MQTT keepalive {self.keepalive} s is not in 1..65535")
        timeouts = (self.connect_timeout, self.ack_timeout, self.publish_timeout)
        if not all(t > 0 for t in timeouts):
            raise ValueError("MQTT timeouts must be positive")
        if not 0 < self.reconnect_min <= self.reconnect_max:
            raise ValueError("MQTT reconnect delays must satisfy 0 < min <= max")
        if self.subscribe_attempts < 1:
            raise ValueError("MQTT subscribe_attempts must be at least 1")
        if self.password is not None and not self.username:
            raise ValueError("an MQTT password needs a username")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(
                "an MQTT client certificate needs its key, and the key its certificate"
            )
        if not self.tls and (self.ca_file or self.cert_file):
            raise ValueError("MQTT CA and client certificates need TLS (mqtts://)")

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        protocol: MqttProtocol = "3.1.1",
        env: Mapping[str, str] | None = None,
    ) -> MqttSettings:
        """``mqtt[s]://[user[:password]@]host[:port][?ca=F&cert=F&key=F]``.

        The port defaults to 1883 (``mqtt``) or 8883 (``mqtts``). Credentials
        and TLS files the URL does not give come from the environment
        (``ACCORDION_MQTT_USERNAME``, ``_PASSWORD``, ``_PASSWORD_FILE``,
        ``_CA``, ``_CERT``, ``_KEY``, and ``_TLS=1`` to turn TLS on; ``env``
        defaults to ``os.environ``).
        Errors show the URL with its password hidden.
        """
        shown = redact_url(url)
        expected = "expected mqtt://host[:port] (or mqtts://; user[:password]@ before the host)"
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise ValueError(f"{shown!r}: {expected}")
        if parts.path not in ("", "/") or parts.fragment:
            raise ValueError(f"{shown!r}: {expected}, nothing more")
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{shown!r}: bad port") from exc
        if not parts.hostname:
            raise ValueError(f"{shown!r}: no host")
        files: dict[str, Path] = {}
        for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
            if key not in _TLS_QUERY or not value:
                raise ValueError(f"{shown!r}: the query may give only ca=, cert= and key= files")
            files[_TLS_QUERY[key]] = Path(value)
        tls = parts.scheme == "mqtts"
        if files and not tls:
            raise ValueError(f"{shown!r}: ca=, cert= and key= need mqtts://")
        settings = cls(
            host=parts.hostname,
            port=_SCHEMES[parts.scheme] if port is None else port,
            protocol=protocol,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            tls=tls,
            **files,  # type: ignore[arg-type]
        )
        return settings.with_env(env)

    def with_env(self, env: Mapping[str, str] | None = None) -> MqttSettings:
        """These settings with what they lack taken from the environment (see ``from_url``)."""
        env = os.environ if env is None else env
        username = self.username or env.get(ENV_USERNAME) or None
        password = self.password
        if password is None and username:
            password = env.get(ENV_PASSWORD) or None
            if password is None and env.get(ENV_PASSWORD_FILE):
                password = read_secret(Path(env[ENV_PASSWORD_FILE]))
        tls = self.tls or env.get(ENV_TLS, "").strip().lower() in ("1", "true", "yes")
        tls_files: dict[str, Path] = {}
        if tls:
            for name, var in (("ca_file", ENV_CA), ("cert_file", ENV_CERT), ("key_file", ENV_KEY)):
                if getattr(self, name) is None and env.get(var):
                    tls_files[name] = Path(env[var])
        return replace(self, username=username, password=password, tls=tls, **tls_files)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        """The broker's URL, with the username but never the password."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "mqtts" if self.tls else "mqtt"
        user = f"{self.username}@" if self.username else ""
        return f"{scheme}://{user}{host}:{self.port}"


def read_secret(path: Path) -> str:
    """A password kept in a file (its first line); the error names the file, not its text."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the MQTT password file {path}: {exc.strerror}") from None
    secret = text.splitlines()[0] if text else ""
    if not secret:
        raise ValueError(f"the MQTT password file {path} is empty")
    return secret


def redact_url(url: str) -> str:
    """``url`` with the password of its userinfo replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***" if "@" in url else url
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{hostport}{slash}{tail}"
