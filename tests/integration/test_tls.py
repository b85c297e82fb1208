"""``mqtts://`` on a real Mosquitto: a TLS listener that requires client certificates.

The certificates are made for this test by the ``openssl`` command (a CA, a
server certificate for 127.0.0.1, a client certificate); the test skips
where ``openssl`` is missing. The listener also requires a password, so the
client presents both, taken from the URL and a password file.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from uuid import uuid4

import pytest

from broker.auth import user_accounts, write_auth_files
from broker.bus import BusError
from broker.local import mosquitto_config
from broker.mqtt import MqttBus
from broker.settings import ENV_PASSWORD_FILE, MqttSettings
from broker.topics import Topics
from tests.broker.scenarios import Inbox
from tests.brokers import MosquittoProcess, start_private_mosquitto

pytestmark = pytest.mark.integration
TOPICS = Topics(f"tls-{uuid4().hex[:6]}/v1")
(ALICE,) = user_accounts("alice", logins=1)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certificates(d: Path) -> None:
    """ca.pem, server.pem/server.key for IP 127.0.0.1, client.pem/client.key."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
             "ca.key", "-out", "ca.pem", "-subj", "/CN=accordion test CA", cwd=d)  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, extra in (("server", ["-extfile", "san.cnf"]), ("client", [])):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *extra, cwd=d)  # fmt: skip


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MosquittoProcess, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    _certificates(d)
    files = write_auth_files(d / "auth", [ALICE], TOPICS)

    def conf(port: int) -> str:
        return mosquitto_config(host="127.0.0.1", port=port, auth=files) + (
            f"cafile {d / 'ca.pem'}\ncertfile {d / 'server.pem'}\nkeyfile {d / 'server.key'}\n"
            "require_certificate true\n"
        )

    broker = start_private_mosquitto(d, conf=conf)
    try:
        yield broker, d
    finally:
        broker.stop()


async def test_mqtts_with_ca_client_certificate_and_password(
    tls_broker: tuple[MosquittoProcess, Path],
) -> None:
    broker, d = tls_broker
    secret = write_auth_files(d / "client", [ALICE], TOPICS).secret_of("alice")
    secret.write_text(ALICE.password + "\n")
    url = (
        f"mqtts://alice@127.0.0.1:{broker.port}"
        f"?ca={d / 'ca.pem'}&cert={d / 'client.pem'}&key={d / 'client.key'}"
    )
    settings = MqttSettings.from_url(url, env={ENV_PASSWORD_FILE: str(secret)})
    async with MqttBus(settings, "alice") as bus, Inbox(bus) as box:
        await bus.subscribe(TOPICS.user_subtree("alice"))
        await bus.publish(TOPICS.user_requests("alice"), b"request")
        assert bus.connected
        assert bus.reconnects == 0
        assert box.pending() == 0  # alice writes requests, and reads only her subtree


@pytest.mark.parametrize("missing", ["client certificate", "CA", "TLS"])
async def test_mqtts_without_what_the_broker_requires_is_refused(
    tls_broker: tuple[MosquittoProcess, Path], missing: str
) -> None:
    broker, d = tls_broker
    base = MqttSettings(
        "127.0.0.1", broker.port, username="alice", password=ALICE.password, connect_timeout=5.0
    )
    ca, cert, key = d / "ca.pem", d / "client.pem", d / "client.key"
    settings = {
        "client certificate": replace(base, tls=True, ca_file=ca),
        # The system's CAs do not know ours: the broker's certificate is not trusted.
        "CA": replace(base, tls=True, cert_file=cert, key_file=key),
        "TLS": base,
    }[missing]
    with pytest.raises(BusError, match="cannot connect") as caught:
        async with MqttBus(settings, f"alice-{uuid4().hex[:4]}"):
            pass
    assert ALICE.password not in str(caught.value)
    # TLS 1.3 reports a missing client certificate after the handshake, and paho
    # then leaves the refused socket to the garbage collector; collect it here,
    # or its ResourceWarning would land in whichever test runs next.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
