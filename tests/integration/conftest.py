"""Real MQTT brokers for the integration tests, one of each per test session.

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
from collections.abc import Iterator
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


def _start_mosquitto(binary: str, workdir: Path, attempts: int = 3) -> Iterator[BrokerEndpoint]:
    host = "127.0.0.1"
    for attempt in range(attempts):
        port = free_port(host)
        conf = workdir / f"mosquitto-{port}.conf"
        conf.write_text(mosquitto_config(host=host, port=port, verbose=True))
        log = workdir / f"mosquitto-{port}.log"
        with log.open("w") as out:
            proc = subprocess.Popen([binary, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while proc.poll() is None and not accepts(host, port):
                if time.monotonic() > deadline:
                    pytest.fail(f"mosquitto did not listen on {host}:{port} in {START_TIMEOUT} s")
                time.sleep(0.02)
            if proc.poll() is not None:
                if attempt + 1 < attempts:  # most likely the port was taken meanwhile
                    continue
                pytest.fail(f"mosquitto exited with {proc.returncode}:\n{log.read_text()}")
            yield BrokerEndpoint("mosquitto", host, port, log)
            return
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


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
    reason = "mosquitto is not installed (apt-get install mosquitto; scripts/setup does it as root)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must have it", pytrace=False)
    pytest.skip(reason)


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
