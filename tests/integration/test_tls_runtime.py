"""``mqtts://`` end to end: a scheduler, an agent and a client, all over TLS with logins.

Mosquitto listens only with TLS and requires a client certificate and a
password (the CA and certificates are made by ``openssl`` for this test, see
``test_tls``). The scheduler and the agent are real processes given nothing
but ``--host/--port`` on their command line: TLS, certificates and login come
from ``ACCORDION_MQTT_TLS``, ``_CA``, ``_CERT``, ``_KEY``, ``_USERNAME`` and
``_PASSWORD_FILE``. The client's URL is ``mqtts://alice@...?ca=&cert=&key=``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from accordion.client.live_client import connect
from accordion.client.specs import job_spec
from accordion.errors import NoReplyError
from broker.auth import AuthFiles, agent_account, scheduler_account, user_accounts, write_auth_files
from broker.local import mosquitto_config
from broker.settings import (
    ENV_CA,
    ENV_CERT,
    ENV_KEY,
    ENV_PASSWORD_FILE,
    ENV_TLS,
    ENV_USERNAME,
)
from broker.topics import Topics
from tests.brokers import MosquittoProcess, start_private_mosquitto
from tests.integration.test_tls import _certificates

pytestmark = pytest.mark.integration
TOPICS = Topics(f"tlsrt-{uuid.uuid4().hex[:6]}/v1")
MACHINE = "tls-n1"
ACCOUNTS = (scheduler_account(), agent_account(MACHINE), *user_accounts("alice", logins=1))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tls_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MosquittoProcess, Path, AuthFiles]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tlsrt")
    _certificates(d)
    files = write_auth_files(d / "auth", ACCOUNTS, TOPICS)

    def conf(port: int) -> str:
        return mosquitto_config(host="127.0.0.1", port=port, auth=files) + (
            f"cafile {d / 'ca.pem'}\ncertfile {d / 'server.pem'}\nkeyfile {d / 'server.key'}\n"
            "require_certificate true\n"
        )

    broker = start_private_mosquitto(d, conf=conf)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        ENV_TLS: "1",
        ENV_CA: str(d / "ca.pem"),
        ENV_CERT: str(d / "client.pem"),
        ENV_KEY: str(d / "client.key"),
    }
    common = [f"--host={broker.host}", f"--port={broker.port}", f"--root={TOPICS.root}"]
    procs = []
    try:
        for login, argv in (
            ("scheduler", ["-m", "scheduler", *common, f"--journal={d / 'j.sqlite'}"]),
            (
                f"agent-{MACHINE}",
                [
                    "-m",
                    "nodeagent",
                    *common,
                    f"--name={MACHINE}",
                    "--cpus=2",
                    f"--state-dir={d / 'state'}",
                ],
            ),
        ):
            child_env = {
                **env,
                ENV_USERNAME: login,
                ENV_PASSWORD_FILE: str(files.secret_of(login)),
            }
            with (d / f"{login}.log").open("ab") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, *argv],
                        env=child_env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=d,
                    )
                )
        yield broker, d, files
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        broker.stop()


async def test_scheduler_agent_and_client_over_mqtts(
    tls_cluster: tuple[MosquittoProcess, Path, AuthFiles],
) -> None:
    broker, d, files = tls_cluster
    url = (
        f"mqtts://alice@127.0.0.1:{broker.port}"
        f"?ca={d / 'ca.pem'}&cert={d / 'client.pem'}&key={d / 'client.key'}"
    )
    os.environ[ENV_PASSWORD_FILE] = str(files.secret_of("alice"))
    try:
        async with connect(url, TOPICS.root, timeout=2.0) as alice:
            assert alice.identity == "alice"
            # Until the scheduler has subscribed and the agent registered, over TLS.
            while True:
                try:
                    status = await alice.status()
                except NoReplyError:
                    continue
                if [m.id for m in status.machines if m.online] == [MACHINE]:
                    break
            reply = await alice.submit([job_spec(job_id="tls-1", procs=1, walltime=3600.0)])
            assert reply.results[0].accepted
            # Answered over TLS (whether its process ran: job processes connect without
            # TLS settings of their own until they are relayed by their agent).
            assert (await alice.cancel("tls-1")).job_id == "tls-1"
    finally:
        del os.environ[ENV_PASSWORD_FILE]
    for log in d.glob("*.log"):
        text = log.read_text()
        for account in ACCOUNTS:
            assert account.password not in text
