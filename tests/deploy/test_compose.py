"""compose.yaml, the docker compose testbed, against the code it runs.

No Docker here: the file is parsed (PyYAML, skipped when absent) and every
service's command is parsed by the program's own option parser, so a renamed
or removed flag breaks this test rather than a container at start-up.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from nodeagent.__main__ import _parser as nodeagent_parser
from scheduler.__main__ import parse_args as scheduler_args
from workload.cluster import load_cluster

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
IMAGE_EXAMPLES = "/opt/accordion/examples"  # where the Dockerfile puts examples/

_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with every variable unset."""
    return _VAR.sub(lambda m: m.group(2) or "", value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = compose["services"]
    return result


def command(service: dict[str, Any]) -> list[str]:
    cmd = service["command"]
    assert isinstance(cmd, list), "commands are lists (no shell word splitting)"
    return [interpolate(str(word)) for word in cmd]


def agents(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if name.startswith("agent-")}


def test_the_core_services_are_there(services: dict[str, Any]) -> None:
    for name in ("broker", "scheduler", "prometheus", "submit"):
        assert name in services
    assert services["broker"]["image"] == "eclipse-mosquitto:2"
    assert services["scheduler"]["build"] == "."
    assert services["submit"]["profiles"] == ["tools"]
    for name in ["scheduler", *agents(services)]:
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["image"] == services["scheduler"]["image"], name
        assert "healthcheck" in services[name], name


def test_the_scheduler_command_parses(services: dict[str, Any]) -> None:
    cmd = command(services["scheduler"])
    assert cmd[:3] == ["python", "-m", "scheduler"]
    args = scheduler_args(cmd[3:])
    assert (args.host, args.port, args.metrics_port) == ("broker", 1883, 9100)
    assert args.policy == "easy"
    assert args.time_scale == 10.0
    assert args.journal.startswith("/data/")
    assert any(v.endswith(":/data") for v in services["scheduler"]["volumes"])


def test_the_agents_are_the_example_cluster(services: dict[str, Any]) -> None:
    seen = []
    for name, service in agents(services).items():
        cmd = command(service)
        assert cmd[:3] == ["python", "-m", "nodeagent"], name
        args = nodeagent_parser().parse_args(cmd[3:])
        assert (args.host, args.port, args.metrics_port) == ("broker", 1883, 9101), name
        assert name == f"agent-{args.name}"
        assert args.time_scale == 10.0, name
        seen.append((args.name, args.cpus, float(args.speed)))
    spec = load_cluster(ROOT / "examples" / "cluster.toml")
    assert sorted(seen) == sorted((m.id, m.cpus, m.speed) for m in spec.machines)


def test_prometheus_scrapes_every_service(services: dict[str, Any]) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = {
        t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    expected = {"scheduler:9100"} | {f"{name}:9101" for name in agents(services)}
    assert expected <= targets
    assert targets - expected <= {"localhost:9090"}


def test_mosquitto_is_configured_as_accordion_up_does() -> None:
    lines = {
        line.strip()
        for line in (DEPLOY / "mosquitto.conf").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }
    for wanted in (
        "listener 1883",
        "allow_anonymous true",
        "set_tcp_nodelay true",
        "max_queued_messages 0",
        "persistence false",
    ):
        assert wanted in lines


def test_the_submit_command_parses(services: dict[str, Any]) -> None:
    import typer.main

    from accordion.cli import app

    cmd = command(services["submit"])
    assert cmd[0] == "accordion"
    group = typer.main.get_command(app)
    args = [a.replace(IMAGE_EXAMPLES, str(ROOT / "examples")) for a in cmd[1:]]
    with group.make_context("accordion", args, resilient_parsing=False) as ctx:
        sub = group.get_command(ctx, args[0])  # type: ignore[attr-defined]
        assert sub is not None
        sub.make_context(args[0], args[1:], parent=ctx)
    assert services["submit"]["environment"]["ACCORDION_BROKER"] == "mqtt://broker:1883"


def test_the_dashboard_uses_metrics_that_exist() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from scheduler.exporter import SchedulerMetrics

    registry = CollectorRegistry()
    SchedulerMetrics(registry)
    exposed = set(re.findall(r"^(accordion_\w+)", generate_latest(registry).decode(), re.M))
    agent_source = (ROOT / "nodeagent" / "exporter.py").read_text()
    agent_names = set(re.findall(r'"(accordion_agent_\w+)"', agent_source))
    exposed |= agent_names | {f"{name}_total" for name in agent_names}  # counters' samples
    dashboard = (DEPLOY / "grafana" / "dashboards" / "accordion.json").read_text()
    used = set(re.findall(r"accordion_\w+", dashboard))
    assert used
    assert used <= exposed, used - exposed


def test_the_dockerfile_installs_the_project() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert "pip install ." in text
    assert f"{IMAGE_EXAMPLES}" in text
