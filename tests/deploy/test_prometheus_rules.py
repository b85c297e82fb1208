"""deploy/prometheus.yml and deploy/rules.yml, checked by Prometheus's own promtool.

``promtool check config`` and ``check rules`` parse them as Prometheus will;
``promtool test rules`` runs deploy/rules.test.yml, which feeds each alert the
series that should fire it and a healthy cluster's that should not.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.prometheus_tools import prometheus_tool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def promtool() -> str:
    return prometheus_tool("promtool")


def run(promtool: str, *args: str) -> str:
    done = subprocess.run(
        [promtool, *args], cwd=DEPLOY, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_config_and_its_rules_are_valid(promtool: str) -> None:
    out = run(promtool, "check", "config", "prometheus.yml")
    assert "SUCCESS" in out


def test_the_rules_are_valid(promtool: str) -> None:
    assert "SUCCESS: 12 rules found" in run(promtool, "check", "rules", "rules.yml")


def test_each_alert_fires_when_it_should_and_only_then(promtool: str) -> None:
    run(promtool, "test", "rules", "rules.test.yml")
    tested = (DEPLOY / "rules.test.yml").read_text()
    for alert in (
        "AccordionAgentDown",
        "AccordionQueueStuck",
        "AccordionRequeueStorm",
        "AccordionSchedulerNotDeciding",
    ):
        assert f"alertname: {alert}" in tested, alert
