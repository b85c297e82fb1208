"""``accordion auth init`` and ``accordion up --auth``'s user errors, without a broker."""

from __future__ import annotations

from pathlib import Path

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
