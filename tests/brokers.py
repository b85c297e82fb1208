"""Real MQTT brokers for the integration tests: one of each for the whole test run.

The fixtures below are registered once, in ``tests/conftest.py``; a conftest
further down must not import them again, or pytest would give its directory
a session broker of its own. Tests that kill, restart or configure a broker
start their own with :func:`start_private_mosquitto` (or the
``private_mosquitto`` fixture) and say so in their docstring.

``mosquitto`` starts the local ``mosquitto`` binary on a free loopback port
with a generated configuration. Without the binary it uses an
``eclipse-mosquitto`` container when a Docker engine answers (testcontainers,
imported only then); otherwise the test is skipped, or fails under CI (``CI``
set), where ``scripts/setup`` must have installed it.

``embedded_broker`` starts ``broker.embedded`` (amqtt, MQTT 3.1.1 only), the
broker ``accordion up`` falls back to. ``mqtt_broker`` is parametrized over
both, for tests every broker we ship must pass.

Each yields a :class:`BrokerEndpoint` (``host``, ``port``, ``url``, ``log``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.embedded import EmbeddedBrokerError, start_embedded_broker
from broker.local import accepts, free_port, mosquitto_binary, mosquitto_config

MOSQUITTO_IMAGE = "eclipse-mosquitto:2"
START_TIMEOUT = 15.0  # seconds for a broker to accept connections


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where a test broker listens."""

    name: str
    host: str
    port: int
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"


def _docker_engine_reachable() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


class MosquittoProcess:
    """One ``mosquitto`` process on a fixed loopback port, which a test may kill and restart.

    ``extra`` is appended to the generated configuration (e.g. the password
    and ACL files of ``broker.auth``). ``kill()`` is SIGKILL: no will of the
    broker's own, no clean close for its clients; ``start()`` again brings it
    back on the same port.
    """

    def __init__(self, binary: str, workdir: Path, port: int, *, conf: str | None = None) -> None:
        self.binary = binary
        self.host = "127.0.0.1"
        self.port = port
        self.conf = workdir / f"mosquitto-{port}.conf"
        self.log = workdir / f"mosquitto-{port}.log"
        text = conf if conf is not None else mosquitto_config(host=self.host, port=port)
        self.conf.write_text(text)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint("mosquitto", self.host, self.port, self.log)

    def start(self) -> bool:
        """Start and wait until it listens; False if it exited (e.g. the port is taken)."""
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [self.binary, "-c", str(self.conf)], stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT
        while self.proc.poll() is None and not accepts(self.host, self.port):
            if time.monotonic() > deadline:
                pytest.fail(f"mosquitto did not listen on {self.host}:{self.port}")
            time.sleep(0.02)
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, and wait for the port to be free again."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_private_mosquitto(
    workdir: Path, *, conf: Callable[[int], str] | None = None, attempts: int = 3
) -> MosquittoProcess:
    """A Mosquitto of a test's own (to kill, restart or configure); the caller stops it.

    ``conf(port)`` is the whole configuration (default: ``mosquitto_config``).
    Skips the test where Mosquitto is not installed (fails under CI).
    """
    binary = mosquitto_binary()
    if binary is None:
        _no_mosquitto()
    assert binary is not None
    for _ in range(attempts):
        port = free_port()
        broker = MosquittoProcess(binary, workdir, port, conf=None if conf is None else conf(port))
        if broker.start():
            return broker
    pytest.fail(f"mosquitto did not start:\n{broker.log.read_text()}")


def _no_mosquitto() -> None:
    reason = "mosquitto is not installed (apt-get install mosquitto; scripts/setup does it as root)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must have it", pytrace=False)
    pytest.skip(reason)


def _start_mosquitto(binary: str, workdir: Path, attempts: int = 3) -> Iterator[BrokerEndpoint]:
    for _ in range(attempts):
        port = free_port()
        conf = mosquitto_config(host="127.0.0.1", port=port, verbose=True)
        broker = MosquittoProcess(binary, workdir, port, conf=conf)
        try:
            if not broker.start():
                continue  # most likely the port was taken meanwhile
            yield broker.endpoint
            return
        finally:
            broker.stop()
    pytest.fail(f"mosquitto did not start:\n{broker.log.read_text()}")


def _mosquitto_container(workdir: Path) -> Iterator[BrokerEndpoint]:
    from testcontainers.core.container import DockerContainer  # optional dependency

    conf = workdir / "mosquitto.conf"
    conf.write_text(mosquitto_config(host="0.0.0.0", port=1883, verbose=True))
    container = (
        DockerContainer(MOSQUITTO_IMAGE)
        .with_volume_mapping(str(conf), "/mosquitto/config/mosquitto.conf", "ro")
        .with_exposed_ports(1883)
    )
    with container:
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(1883))
        deadline = time.monotonic() + START_TIMEOUT
        while not accepts(host, port):
            if time.monotonic() > deadline:
                pytest.fail(f"the {MOSQUITTO_IMAGE} container did not listen on {host}:{port}")
            time.sleep(0.1)
        yield BrokerEndpoint("mosquitto", host, port)


@pytest.fixture(scope="session")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerEndpoint]:
    """A Mosquitto for the whole session, on its own loopback port."""
    workdir = tmp_path_factory.mktemp("mosquitto")
    binary = mosquitto_binary()
    if binary is not None:
        yield from _start_mosquitto(binary, workdir)
        return
    if _docker_engine_reachable():
        try:
            import testcontainers  # noqa: F401
        except ImportError:
            pass
        else:
            yield from _mosquitto_container(workdir)
            return
    _no_mosquitto()


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerEndpoint]:
    """The embedded broker (amqtt in its own process) for the whole session."""
    log = tmp_path_factory.mktemp("embedded") / "amqtt.log"
    host = "127.0.0.1"
    last: EmbeddedBrokerError | None = None
    for _ in range(3):  # the free port may be taken before the broker binds it
        try:
            handle = start_embedded_broker(host, free_port(host), log=log)
        except EmbeddedBrokerError as exc:
            last = exc
            continue
        with handle:
            yield BrokerEndpoint("amqtt", handle.host, handle.port, log)
        return
    pytest.fail(f"{last}\n{log.read_text()}")


@pytest.fixture(scope="session", params=["mosquitto", "amqtt"])
def mqtt_broker(request: pytest.FixtureRequest) -> BrokerEndpoint:
    """Each broker we ship, in turn: Mosquitto, then the embedded amqtt."""
    fixture = "mosquitto" if request.param == "mosquitto" else "embedded_broker"
    endpoint: BrokerEndpoint = request.getfixturevalue(fixture)
    return endpoint


@pytest.fixture
def private_mosquitto(tmp_path: Path) -> Iterator[MosquittoProcess]:
    """A Mosquitto of this test's own, which it may kill and restart on the same port."""
    broker = start_private_mosquitto(tmp_path)
    try:
        yield broker
    finally:
        broker.stop()
