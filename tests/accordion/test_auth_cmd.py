"""``accordion auth init`` and ``accordion up --auth``'s user errors, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from accordion.commands.live import settings_env
from broker.settings import MqttSettings

runner = CliRunner()


def test_auth_init_writes_every_login_and_prints_no_secret(tmp_path: Path) -> None:
    out = tmp_path / "auth"
    args = ["auth", "init", str(out), "--agent", "n1", "--user", "alice", "--admin", "root"]
    result = runner.invoke(app, [*args, "--logins", "1", "--mount", "/mosquitto/auth"])
    assert result.exit_code == 0, result.output
    secrets = [p for p in (out / "secrets").iterdir() if p.suffix != ".env"]
    # The agent's probe login (its name check before it connects) has its own file.
    names = sorted(p.name for p in secrets)
    assert names == ["agent-n1", "agent-n1~probe", "alice", "root", "scheduler"]
    for path in secrets:
        assert path.read_text().strip() not in result.output
        assert path.stat().st_mode & 0o077 == 0
    assert "alice.env" in result.output
    conf = (out / "mosquitto-auth.conf").read_text()
    assert "password_file /mosquitto/auth/passwd" in conf
    assert "use_username_as_clientid true" in conf
    assert "allow_anonymous false" in conf


def test_auth_init_refuses_a_bad_name_in_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["auth", "init", str(tmp_path), "--user", "a/b"])
    assert result.exit_code == 2
    assert "a/b" in result.output
    assert "Traceback" not in result.output


def test_up_auth_needs_mosquitto(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["up", "--auth", "--broker-kind", "embedded", "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 2
    assert "--auth" in result.output
    assert "Traceback" not in result.output


def test_scheduler_and_agent_commands_pass_the_urls_login_and_tls_by_environment() -> None:
    url = "mqtts://bob:pw@broker.example:8884?ca=/c/ca.pem&cert=/c/c.pem&key=/c/c.key"
    given = MqttSettings.from_url(url, env={})
    env = settings_env(given)
    # What the scheduler and the agent rebuild from --host/--port and that environment.
    rebuilt = MqttSettings(host=given.host, port=given.port).with_env(env)
    assert rebuilt == given
    assert settings_env(MqttSettings.from_url("mqtt://h:1", env={})) == {}


@pytest.mark.parametrize("name", ["bob~x", "a b", "x:y", "tab\there", "hash#", "scheduler"])
def test_auth_init_and_up_refuse_names_the_login_scheme_cannot_carry(
    tmp_path: Path, name: str
) -> None:
    result = runner.invoke(app, ["auth", "init", str(tmp_path / "a"), "--user", name])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    up = runner.invoke(app, ["up", "--user", name, "--run-dir", str(tmp_path / "r")])
    assert up.exit_code == 2, up.output
    assert "Traceback" not in up.output
    assert not (tmp_path / "r").exists()  # refused before anything started


def test_up_refuses_a_bad_limits_or_association_file_before_starting(tmp_path: Path) -> None:
    limits = tmp_path / "limits.toml"
    limits.write_text("[limits]\nmax_user_cpus = 0\n")
    result = runner.invoke(app, ["up", "--limits", str(limits), "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert "max_user_cpus must be a whole number >= 1" in result.output
    assoc = tmp_path / "assoc.toml"
    assoc.write_text("[users.alice]\naccounts = []\n")
    result = runner.invoke(
        app, ["up", "--associations", str(assoc), "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 2, result.output
    assert "accounts is empty" in result.output
    result = runner.invoke(
        app, ["up", "--max-request-bytes", "99999999", "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 2, result.output
    assert "max_request_bytes" in result.output
    assert not (tmp_path / "r").exists()
