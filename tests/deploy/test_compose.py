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
def base() -> dict[str, Any]:
    """compose.yaml alone: what `docker stack deploy -c compose.yaml` reads."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def services(base: dict[str, Any]) -> dict[str, Any]:
    """compose.yaml with compose.override.yaml over it, as `docker compose` reads them
    (each service's keys merged; enough for the keys these tests read)."""
    override = yaml.safe_load((ROOT / "compose.override.yaml").read_text())
    merged: dict[str, Any] = {name: dict(s) for name, s in base["services"].items()}
    for name, service in override["services"].items():
        merged.setdefault(name, {}).update(service)
    return merged


#: Keys `docker stack deploy` refuses (its loader's schema), kept in compose.override.yaml.
COMPOSE_ONLY = {"build", "pull_policy", "profiles", "ports"}


def test_compose_yaml_alone_is_what_a_swarm_accepts(base: dict[str, Any]) -> None:
    assert "name" not in base
    for name, service in base["services"].items():
        assert not COMPOSE_ONLY & set(service), (name, COMPOSE_ONLY & set(service))
        depends = service.get("depends_on", [])
        assert isinstance(depends, list), f"{name}: only the short depends_on form"
    for config in base["configs"].values():
        assert (ROOT / config["file"]).is_file(), config
    # No virtual IPs: on the single-node Swarm here the VIP of the broker was "No route to
    # host", and Prometheus must see every agent task, not one VIP.
    for name, service in base["services"].items():
        assert service["deploy"]["endpoint_mode"] == "dnsrr", name


def test_docker_stack_config_accepts_compose_yaml() -> None:
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        pytest.skip("no docker command here")
    done = subprocess.run(
        ["docker", "stack", "config", "-c", "compose.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if "unknown command" in done.stderr or "is not a docker command" in done.stderr:
        pytest.skip("this docker CLI has no `stack config`")
    assert done.returncode == 0, done.stderr
    assert "endpoint_mode: dnsrr" in done.stdout


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
    assert args.time_scale == 40.0
    assert args.journal.startswith("/data/")
    assert any(v.endswith(":/data") for v in services["scheduler"]["volumes"])


def test_the_agent_classes_at_their_default_replicas_are_the_example_cluster(
    services: dict[str, Any],
) -> None:
    seen = []
    for name, service in agents(services).items():
        cmd = command(service)
        assert cmd[:3] == ["python", "-m", "nodeagent"], name
        args = nodeagent_parser().parse_args(cmd[3:])
        assert (args.host, args.port, args.metrics_port) == ("broker", 1883, 9101), name
        machine_class = name.removeprefix("agent-")
        # Every replica names itself from its container's hostname: never a duplicate.
        assert args.name == f"{machine_class}-{{hostname}}", name
        # Its client id is its machine id: the ACL's %c patterns give it its own topics.
        assert args.client_id == "{name}", name
        assert args.labels == machine_class, name
        assert args.time_scale == 40.0, name
        assert service["deploy"]["endpoint_mode"] == "dnsrr", name  # Swarm DNS discovery
        assert "container_name" not in service, name  # would forbid --scale
        assert "ports" not in service, name  # a host port would forbid --scale
        replicas = int(interpolate(str(service["deploy"]["replicas"])))
        seen.append((machine_class, args.cpus, float(args.speed), replicas))
    spec = load_cluster(ROOT / "examples" / "cluster.toml")
    classes: dict[str, tuple[int, float, int]] = {}
    for m in spec.machines:
        base = m.id.rstrip("0123456789").rstrip("-")
        cpus, speed, count = classes.get(base, (m.cpus, m.speed, 0))
        classes[base] = (cpus, speed, count + 1)
    assert sorted(seen) == sorted((k, c, s, n) for k, (c, s, n) in classes.items())


def test_replica_names_differ_by_hostname() -> None:
    from nodeagent.__main__ import machine_name

    assert machine_name("fast-{hostname}", "3f2a9c1d0b7e") == "fast-3f2a9c1d0b7e"
    assert machine_name("fast-{hostname}", "node1.example.org") == "fast-node1"
    assert machine_name("big", "anything") == "big"


def test_prometheus_discovers_every_agent_service_by_dns(services: dict[str, Any]) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for job in ("scheduler", "agents"):
        assert "static_configs" not in jobs[job], f"{job}: no static target list"
    agent_names = {n for sd in jobs["agents"]["dns_sd_configs"] for n in sd["names"]}
    assert agent_names == set(agents(services))
    assert {sd["port"] for sd in jobs["agents"]["dns_sd_configs"]} == {9101}
    assert jobs["scheduler"]["dns_sd_configs"][0]["names"] == ["scheduler"]
    assert config["rule_files"] == ["rules.yml"]
    targets = {c["target"] for c in services["prometheus"]["configs"]}
    assert targets == {"/etc/prometheus/prometheus.yml", "/etc/prometheus/rules.yml"}


def test_grafana_is_pinned_by_version(services: dict[str, Any]) -> None:
    image = services["grafana"]["image"]
    assert re.fullmatch(r"grafana/grafana-oss:\d+\.\d+\.\d+", image), image
    assert not services["prometheus"]["image"].endswith(":latest")


def listeners() -> dict[str, set[str]]:
    """deploy/mosquitto.conf's settings: the global ones under "", then per listener."""
    sections: dict[str, set[str]] = {"": set()}
    current = ""
    for raw in (DEPLOY / "mosquitto.conf").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("listener "):
            current = line
            sections[current] = set()
        else:
            sections[current].add(line)
    return sections


def test_mosquitto_is_configured_as_accordion_up_does_with_logins() -> None:
    sections = listeners()
    for wanted in (
        "per_listener_settings true",
        "set_tcp_nodelay true",
        "max_queued_messages 0",
        "persistence false",
    ):
        assert wanted in sections[""]
    assert set(sections) == {"", "listener 1883", "listener 1884", "listener 1880 127.0.0.1"}
    internal, users = sections["listener 1883"], sections["listener 1884"]
    for section in (internal, users):
        assert "allow_anonymous false" in section
    assert "password_file /run/secrets/mosquitto-internal.passwd" in internal
    assert "acl_file /run/secrets/mosquitto-internal.acl" in internal
    assert "password_file /run/secrets/mosquitto-users.passwd" in users
    assert "use_username_as_clientid true" in users  # no user takes over a client id
    # Only the health check's loopback listener is anonymous, and it may read one topic.
    health = sections["listener 1880 127.0.0.1"]
    assert "allow_anonymous true" in health
    acl = (DEPLOY / "mosquitto-health.acl").read_text().split("\n")
    assert [line for line in acl if line and not line.startswith("#")] == [
        "topic read $SYS/broker/uptime"
    ]


def test_every_login_file_is_where_its_reader_looks(
    base: dict[str, Any], services: dict[str, Any], tmp_path: Path
) -> None:
    """The files `accordion auth init --compose` writes, the paths the services and the
    broker read, the volumes compose mounts and the secrets a Swarm mounts agree."""
    from broker.auth import compose_accounts, write_compose_auth
    from broker.topics import Topics

    write_compose_auth(tmp_path, compose_accounts(["alice"], ["admin"], logins=2), Topics())
    swarm = yaml.safe_load((ROOT / "compose.swarm.yaml").read_text())
    volume_of = {"broker": "auth-broker", "scheduler": "auth-scheduler", "submit": "auth-users"}
    readers = {
        "scheduler": "scheduler",
        "submit": "alice",
        **dict.fromkeys(agents(services), "agent"),
    }
    for name, login in readers.items():
        env = services[name]["environment"]
        assert interpolate(env["ACCORDION_MQTT_USERNAME"]) == login, name
        path = interpolate(env["ACCORDION_MQTT_PASSWORD_FILE"])
        assert path == f"/run/secrets/{login}", name
        folder = {"scheduler": "scheduler", "alice": "users"}.get(login, "agent")
        assert (tmp_path / folder / login).is_file(), name
        volume = volume_of.get(name, "auth-agent")
        assert f"{volume}:/run/secrets:ro" in services[name]["volumes"], name
        if name != "submit":
            assert swarm["services"][name]["secrets"] == [login], name
    wanted = {
        line.split()[1].removeprefix("/run/secrets/")
        for section in listeners().values()
        for line in section
        if line.startswith(("password_file", "acl_file")) and "/run/secrets/" in line
    }
    assert wanted == {p.name for p in (tmp_path / "broker").iterdir()}
    assert set(swarm["services"]["broker"]["secrets"]) == wanted
    assert "auth-broker:/run/secrets:ro" in services["broker"]["volumes"]
    init = services["auth-init"]
    assert init["user"] == "root"
    assert command(init)[:5] == ["accordion", "auth", "init", "/auth", "--compose"]
    assert services["broker"]["depends_on"]["auth-init"]["condition"] == (
        "service_completed_successfully"
    )
    assert "auth-init" not in base["services"]  # compose only; a Swarm uses secrets


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
    # The user listener, as the user the init step made.
    assert services["submit"]["environment"]["ACCORDION_BROKER"] == "mqtt://broker:1884"
    assert "scheduler-data:/data" in services["submit"]["volumes"]  # the journal it reads


def test_the_dockerfile_installs_the_project() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert "pip install ." in text
    assert f"{IMAGE_EXAMPLES}" in text


def test_the_dask_profile_parses_and_publishes_on_loopback_only(
    base: dict[str, Any], services: dict[str, Any]
) -> None:
    pytest.importorskip("distributed")
    from distributed.cli.dask_scheduler import main as dask_scheduler
    from distributed.cli.dask_worker import main as dask_worker

    scheduler, worker = services["dask-scheduler"], services["dask-worker"]
    assert "dask-scheduler" not in base["services"]  # compose only, behind a profile
    for service in (scheduler, worker):
        assert service["profiles"] == ["dask"]
        assert interpolate(service["image"]) == "accordion:local"  # the testbed's own image
    assert command(scheduler)[:2] == ["dask", "scheduler"]
    params = dask_scheduler.make_context("dask scheduler", command(scheduler)[2:]).params
    assert (params["host"], params["port"]) == ("0.0.0.0", "8786")
    assert command(worker)[:2] == ["dask", "worker"]
    params = dask_worker.make_context("dask worker", command(worker)[2:]).params
    assert params["scheduler"] == "tcp://dask-scheduler:8786"
    assert (params["nthreads"], params["n_workers"]) == (1, "1")
    assert "ports" not in worker  # a host port would forbid --scale
    ports = [interpolate(p) for p in scheduler["ports"]]
    assert ports == ["127.0.0.1:8786:8786", "127.0.0.1:8787:8787"]
    assert worker["depends_on"]["dask-scheduler"]["condition"] == "service_healthy"


def test_the_image_has_the_dask_extra() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "pip install -c requirements.lock '.[dask]'" in text
