"""MQTT settings with credentials and TLS: parsed from URL and environment, never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.mqtt import MqttBus, tls_parameters
from broker.settings import (
    ENV_CA,
    ENV_PASSWORD,
    ENV_PASSWORD_FILE,
    ENV_USERNAME,
    MqttSettings,
    redact_url,
)

SECRET = "s3cr3t-Pa55"


def test_credentials_in_the_url() -> None:
    s = MqttSettings.from_url(f"mqtt://alice:{SECRET}@broker:1884", env={})
    assert (s.host, s.port, s.username, s.password, s.tls) == (
        "broker",
        1884,
        "alice",
        SECRET,
        False,
    )
    assert s.url == "mqtt://alice@broker:1884"


def test_percent_encoded_credentials() -> None:
    s = MqttSettings.from_url("mqtt://al%40ce:p%3Aw%2Fd@broker", env={})
    assert (s.username, s.password) == ("al@ce", "p:w/d")


def test_mqtts_with_ca_and_client_certificate(tmp_path: Path) -> None:
    s = MqttSettings.from_url(
        f"mqtts://bob@broker?ca={tmp_path}/ca.pem&cert={tmp_path}/c.pem&key={tmp_path}/k.pem",
        env={},
    )
    assert (s.port, s.tls, s.username) == (8883, True, "bob")
    assert (s.ca_file, s.cert_file, s.key_file) == (
        tmp_path / "ca.pem",
        tmp_path / "c.pem",
        tmp_path / "k.pem",
    )
    params = tls_parameters(s)
    assert params is not None
    assert params.ca_certs == str(tmp_path / "ca.pem")
    assert s.url == "mqtts://bob@broker:8883"


def test_credentials_from_the_environment(tmp_path: Path) -> None:
    env = {ENV_USERNAME: "carol", ENV_PASSWORD: SECRET}
    s = MqttSettings.from_url("mqtt://broker", env=env)
    assert (s.username, s.password) == ("carol", SECRET)
    # The URL wins over the environment.
    s = MqttSettings.from_url("mqtt://dave:pw@broker", env=env)
    assert (s.username, s.password) == ("dave", "pw")
    secret_file = tmp_path / "pw"
    secret_file.write_text(f"{SECRET}\n")
    s = MqttSettings.from_url("mqtt://erin@broker", env={ENV_PASSWORD_FILE: str(secret_file)})
    assert (s.username, s.password) == ("erin", SECRET)
    s = MqttSettings(host="b", tls=True).with_env({ENV_CA: "/ca.pem"})
    assert s.ca_file == Path("/ca.pem")


def test_password_file_errors_name_the_file_not_the_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the MQTT password file") as caught:
        MqttSettings.from_url("mqtt://u@b", env={ENV_PASSWORD_FILE: str(tmp_path / "none")})
    assert SECRET not in str(caught.value)
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        MqttSettings.from_url("mqtt://u@b", env={ENV_PASSWORD_FILE: str(empty)})


def test_the_password_is_never_shown() -> None:
    s = MqttSettings.from_url(f"mqtt://alice:{SECRET}@broker", env={})
    bus = MqttBus(s, "c")
    for text in (repr(s), str(s), s.url, repr(bus.settings)):
        assert SECRET not in text
    assert "alice" in repr(s)


@pytest.mark.parametrize(
    "url",
    [
        f"mqtt://alice:{SECRET}@broker:http",
        f"mqtt://alice:{SECRET}@broker:99999",
        f"mqtt://alice:{SECRET}@broker/path",
        f"tcp://alice:{SECRET}@broker",
        f"mqtt://alice:{SECRET}@broker?ca=x",
        f"mqtts://alice:{SECRET}@broker?nope=1",
        f"mqtt://alice:{SECRET}@",
    ],
)
def test_url_errors_hide_the_password(url: str) -> None:
    with pytest.raises(ValueError, match="mqtt") as caught:
        MqttSettings.from_url(url, env={})
    assert SECRET not in str(caught.value)
    assert "***" in str(caught.value)


def test_redact_url() -> None:
    assert redact_url("mqtt://u:p@h:1/x") == "mqtt://u:***@h:1/x"
    assert redact_url("mqtt://h:1") == "mqtt://h:1"
    assert redact_url("u:p@h") == "***"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"password": "x"},
        {"tls": False, "ca_file": Path("/ca")},
        {"tls": True, "cert_file": Path("/c")},
        {"reconnect_min": 0.0},
        {"reconnect_min": 3.0, "reconnect_max": 2.0},
        {"subscribe_attempts": 0},
        {"publish_timeout": 0.0},
    ],
)
def test_inconsistent_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"MQTT|password"):
        MqttSettings(**kwargs)  # type: ignore[arg-type]
