"""The embedded broker: amqtt in a process of its own, for machines without Mosquitto.

Theory of operation. ``accordion up`` uses Mosquitto when it is installed and
this otherwise. amqtt is a pure-Python asyncio broker. It speaks MQTT 3.1.1
only, which is all the protocol needs (correlation ids travel in payloads); it
keeps retained messages, publishes Last Wills, and, with the
:class:`DurableAnonymousAuth` plugin below, queues QoS 1 messages for a
``clean_session=False`` client while it is away. It costs several times
Mosquitto's CPU per message (6.5x measured here, 430 us against 66 us for a
QoS 1 message), so it runs as a separate process (``python -m broker.embedded
--port N``), never in the scheduler's event loop, whose CPU it would share.

Known differences from Mosquitto (amqtt 0.12; the integration tests mark them):
a second connection with the same client id takes over the session but the
broker leaves the old connection open (and publishes no will for it), and
messages queued for an offline session arrive flagged retained.

:func:`start_embedded_broker` starts that process on a loopback port and
returns once it accepts connections; the handle's ``stop()`` ends it. The
child also ends when its parent dies (it watches its stdin, a pipe the parent
holds), so a killed ``accordion up`` leaves no broker behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from amqtt.broker import Broker
from amqtt.errors import BrokerError
from amqtt.plugins.authentication import AnonymousAuthPlugin
from amqtt.session import Session

_READY = "accordion-embedded-broker ready"
_log = logging.getLogger("broker.embedded")


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be started."""


class DurableAnonymousAuth(AnonymousAuthPlugin):  # type: ignore[misc]  # amqtt is untyped
    """Admits everyone, like amqtt's anonymous plugin, but keeps their sessions durable.

    amqtt queues nothing for an offline ``clean_session=False`` client it
    admitted anonymously; Mosquitto does, and the runtime relies on it (an
    agent reconnecting gets the commands sent meanwhile).
    """

    async def authenticate(self, *, session: Session) -> bool:
        admitted: bool = await super().authenticate(session=session)
        session.is_anonymous = False
        return admitted


def broker_config(host: str, port: int) -> dict[str, Any]:
    """amqtt's configuration: one TCP listener, everyone admitted, no $SYS topics."""
    return {
        "listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
        # Sessions of clean_session=False clients never expire (Mosquitto's default).
        "session_expiry_interval": None,
        "plugins": {
            f"{__name__}.{DurableAnonymousAuth.__name__}": {"allow_anonymous": True},
        },
    }


async def serve(host: str, port: int, *, stop: asyncio.Event, ready: IO[str] | None) -> None:
    """Run the broker on ``host:port`` until ``stop`` is set."""
    broker = Broker(broker_config(host, port))
    try:
        await broker.start()
    except BrokerError as exc:
        raise EmbeddedBrokerError(f"cannot serve on {host}:{port}: {exc}") from exc
    try:
        if ready is not None:
            print(f"{_READY} {host}:{port}", file=ready, flush=True)
        await stop.wait()
    finally:
        await broker.shutdown()


@dataclass
class EmbeddedBroker:
    """A running embedded broker process; ``stop()`` (or ``with``) ends it."""

    host: str
    port: int
    process: subprocess.Popen[str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        proc = self.process
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_embedded_broker(
    host: str = "127.0.0.1",
    port: int = 1883,
    *,
    log: Path | None = None,
    timeout: float = 15.0,
) -> EmbeddedBroker:
    """Start the embedded broker in its own process; return once it listens.

    Its log (warnings and errors) goes to ``log``, else to this process's
    stderr. Raises :class:`EmbeddedBrokerError` with the broker's own words if
    it exits or stays silent for ``timeout`` seconds (e.g. the port is taken).
    """
    cmd = [sys.executable, "-m", "broker.embedded", "--host", host, "--port", str(port)]
    cmd.append("--exit-on-stdin-eof")
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(log.open("a")) if log is not None else None
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=Path(__file__).resolve().parents[1],  # so `-m broker.embedded` resolves
        )
    handle = EmbeddedBroker(host, port, proc)
    assert proc.stdout is not None
    try:
        line = _read_line(proc.stdout, timeout)
    except BaseException:
        handle.stop()
        raise
    finally:
        proc.stdout.close()
    if not line.startswith(_READY):
        code = proc.poll()
        handle.stop()
        why = f"exited with code {code}" if code is not None else f"silent for {timeout} s"
        where = f"; its log is {log}" if log is not None else ""
        raise EmbeddedBrokerError(f"embedded broker on {host}:{port} did not start: {why}{where}")
    return handle


def _read_line(stream: IO[str], timeout: float) -> str:
    """One line from a pipe, or '' at EOF or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    buf = b""
    while not buf.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return ""
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            return ""
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")


async def _run(host: str, port: int, exit_on_stdin_eof: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if exit_on_stdin_eof:
        # The parent holds our stdin; its death closes the pipe.
        loop.add_reader(sys.stdin.fileno(), _on_stdin, sys.stdin.fileno(), stop)
    await serve(host, port, stop=stop, ready=sys.stdout)


def _on_stdin(fd: int, stop: asyncio.Event) -> None:
    if not os.read(fd, 4096):
        asyncio.get_running_loop().remove_reader(fd)
        stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.embedded",
        description="The embedded MQTT 3.1.1 broker (amqtt) for machines without Mosquitto.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=1883, help="TCP port to listen on")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="WARNING", help="logging level (WARNING)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415

        loop_factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_run(args.host, args.port, args.exit_on_stdin_eof))
    except EmbeddedBrokerError as exc:
        _log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
