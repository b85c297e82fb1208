"""A local cluster's wiring (``accordion.cluster.wiring``): refusals, ports, logins,
command lines; no process is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from accordion.cluster.processes import UpError
from accordion.cluster.wiring import ADMIN, LOGINS_PER_USER, Wiring
from accordion.errors import UserError
from broker.settings import ENV_PASSWORD_FILE, ENV_PROBE_USERNAME, ENV_USERNAME
from model.execution import DEFAULT_MODEL
from model.machine import Machine
from scheduler.planning.placement import PlacementRule


@pytest.mark.parametrize("kind", ["embedded", "external"])
def test_logins_need_a_mosquitto_we_start(kind: str) -> None:
    with pytest.raises(UserError, match="need the Mosquitto broker"):
        Wiring("r/v1", kind, auth=True)  # type: ignore[arg-type]


def test_a_user_cannot_take_the_admins_name() -> None:
    with pytest.raises(UserError, match="admin login"):
        Wiring("r/v1", "mosquitto", auth=True, users=("alice", ADMIN))


def test_no_port_is_handed_out_twice() -> None:
    wiring = Wiring("r/v1", "embedded")
    ports = [wiring.pick_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)


def test_each_child_gets_its_login_by_path_and_the_admin_rotates(tmp_path: Path) -> None:
    wiring = Wiring("r/v1", "mosquitto", auth=True, users=("alice",), extra_agents=("far",))
    wiring.write_logins(tmp_path, ["m1"])
    assert wiring.auth_files is not None
    env = wiring.env({"PATH": "/bin"}, "agent-m1")
    secret = wiring.auth_files.secret_of("agent-m1")
    assert env == {
        "PATH": "/bin",
        ENV_USERNAME: "agent-m1",
        ENV_PASSWORD_FILE: str(secret),
        ENV_PROBE_USERNAME: "agent-m1~probe",  # its name check's own login
    }
    assert secret.read_text().strip() not in " ".join(env.values())  # a path, not the secret
    assert wiring.credentials("agent-far").password_file == wiring.auth_files.secret_of("agent-far")
    turns = [wiring.admin_credentials() for _ in range(LOGINS_PER_USER + 1)]
    logins = [c.username for c in turns if c is not None]
    assert logins == [f"{ADMIN}~2", f"{ADMIN}~3", f"{ADMIN}~4", ADMIN, f"{ADMIN}~2"]


def test_without_logins_there_are_none(tmp_path: Path) -> None:
    wiring = Wiring("r/v1", "embedded")
    wiring.write_logins(tmp_path, ["m1"])
    assert wiring.auth_files is None
    assert wiring.env({"A": "1"}, "scheduler") == {"A": "1"}
    assert wiring.admin_credentials() is None
    with pytest.raises(UpError, match="no logins"):
        wiring.credentials("alice")


def test_the_command_lines_carry_the_broker_root_and_ports(tmp_path: Path) -> None:
    wiring = Wiring("r/v1", "external", broker_url="mqtt://[::1]:1884")
    assert wiring.broker_address() == ("::1", 1884)
    scheduler = wiring.scheduler_command(
        python="py",
        policy="easy",
        policy_options={"budget": "3"},
        placement=PlacementRule.FASTEST,
        journal=tmp_path / "j.sqlite",
        metrics_port=9001,
        time_scale=10.0,
        heartbeat=0.5,
        execution=DEFAULT_MODEL,
    )
    assert scheduler[:3] == ["py", "-m", "scheduler"]
    for arg in ("--host=::1", "--port=1884", "--root=r/v1", "--policy-opt=budget=3"):
        assert arg in scheduler
    assert "--client-id=accordion-scheduler-r_v1" in scheduler  # one per root on a broker
    agent = wiring.agent_command(
        Machine(id="m1", cpus=4, speed=2.0, labels=("gpu",)),
        python="py",
        metrics_port=9002,
        time_scale=10.0,
        heartbeat=0.5,
        lease=2.0,
        walltime_grace=5.0,
        state_dir=Path("run/agents/m1"),
    )
    assert "--state-dir=run/agents/m1" in agent
    for arg in ("--name=m1", "--cpus=4", "--speed=2.0", "--metrics-port=9002", "--labels=gpu"):
        assert arg in agent
