"""Cluster descriptions: TOML files and SWF headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from accordion.cluster.speed import HostSpeed
from model import Machine
from workload.cluster import (
    ClusterError,
    ClusterSpec,
    cluster_from_header,
    load_cluster,
    parse_cluster,
)
from workload.swf import SwfHeader, read_header

PWA = Path(__file__).resolve().parents[3] / "shared" / "workloads" / "pwa"

EXAMPLE = """\
name = "demo"            # optional
reference_speed = 1.5    # optional, default 1.0

[[machine]]
name = "fast"
cpus = 16
speed = 2.0
count = 2
labels = ["gpu"]

[[machine]]
name = "slow"
cpus = 4
"""


def toml(tmp_path: Path, text: str, name: str = "cluster.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_file(tmp_path: Path) -> None:
    spec = load_cluster(toml(tmp_path, EXAMPLE))
    assert spec.name == "demo"
    assert spec.reference_speed == 1.5
    assert spec.machines == (
        Machine(id="fast-0", cpus=16, speed=2.0, labels=("gpu",)),
        Machine(id="fast-1", cpus=16, speed=2.0, labels=("gpu",)),
        Machine(id="slow", cpus=4),
    )
    assert spec.total_cpus == 36
    assert spec.speeds == {"fast-0": 2.0, "fast-1": 2.0, "slow": 1.0}


def test_defaults(tmp_path: Path) -> None:
    spec = load_cluster(
        toml(tmp_path, '[[machine]]\nname = "m"\ncpus = 8\nspeed = 3\n', "lab.toml")
    )
    assert spec == ClusterSpec(
        name="lab", reference_speed=1.0, machines=(Machine(id="m", cpus=8, speed=3.0),)
    )
    assert isinstance(spec.machines[0].speed, float)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('nmae = "x"\n[[machine]]\nname = "a"\ncpus = 1\n', r"unknown key\(s\) nmae"),
        (
            '[[machine]]\nname = "a"\ncpus = 1\nsped = 2.0\n',
            r"machine #1 \('a'\): unknown key\(s\) sped",
        ),
        (
            '[[machine]]\nname = "a"\ncpus = 0\n',
            r"machine #1 \('a'\): cpus must be an integer >= 1, got 0",
        ),
        ('[[machine]]\nname = "a"\ncpus = 2.5\n', r"cpus must be an integer >= 1, got 2.5"),
        ('[[machine]]\nname = "a"\ncpus = true\n', r"cpus must be an integer >= 1, got True"),
        ('[[machine]]\nname = "a"\n', r"machine #1 \('a'\): cpus is required"),
        ('[[machine]]\nname = "a"\ncpus = 1\nspeed = 0\n', r"speed must be a number > 0, got 0"),
        ('[[machine]]\nname = "a"\ncpus = 1\nspeed = -1.5\n', r"speed must be a number > 0"),
        ('[[machine]]\nname = "a"\ncpus = 1\nspeed = nan\n', r"speed must be a number > 0"),
        ('[[machine]]\nname = "a"\ncpus = 1\nspeed = "fast"\n', r"speed must be a number > 0"),
        ('[[machine]]\nname = "a"\ncpus = 1\ncount = 0\n', r"count must be an integer >= 1, got 0"),
        ('[[machine]]\nname = "a"\ncpus = 1\nlabels = "gpu"\n', r"labels must be a list"),
        ("[[machine]]\ncpus = 1\n", r"machine #1: name must be a non-empty string, got None"),
        ('[[machine]]\nname = ""\ncpus = 1\n', r"machine #1: name must be a non-empty string"),
        (
            '[[machine]]\nname = "a"\ncpus = 1\n[[machine]]\nname = "b"\ncpus = 1\n'
            '[[machine]]\nname = "a"\ncpus = 2\n',
            r"machine #3: name 'a' already used by machine #1",
        ),
        (
            '[[machine]]\nname = "n"\ncpus = 1\ncount = 2\n[[machine]]\nname = "n-1"\ncpus = 1\n',
            r"machine #2: name 'n-1' already used by machine #1",
        ),
        ('name = "empty"\n', r"no \[\[machine\]\] entries"),
        ("machine = []\n", r"non-empty array of tables"),
        ('machine = "x"\n', r"non-empty array of tables"),
        ("reference_speed = 0\n[[machine]]\nname = 'a'\ncpus = 1\n", r"reference_speed must be"),
        (
            "name = 3\n[[machine]]\nname = 'a'\ncpus = 1\n",
            r"name must be a non-empty string, got 3",
        ),
    ],
)
def test_errors_name_file_and_entry(tmp_path: Path, text: str, message: str) -> None:
    path = toml(tmp_path, text)
    with pytest.raises(ClusterError, match=message) as info:
        load_cluster(path)
    assert str(info.value).startswith(f"{path}: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"nothere\.toml: no such cluster file"):
        load_cluster(tmp_path / "nothere.toml")


def test_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"broken\.toml: not valid TOML"):
        load_cluster(toml(tmp_path, "[[machine]\nname = ", "broken.toml"))


def test_parse_cluster_from_data() -> None:
    spec = parse_cluster({"machine": [{"name": "x", "cpus": 2, "count": 3}]})
    assert [m.id for m in spec.machines] == ["x-0", "x-1", "x-2"]
    assert spec.name == "cluster"


def test_spec_validates_itself() -> None:
    with pytest.raises(ClusterError, match="no machines"):
        ClusterSpec(name="c", reference_speed=1.0, machines=())
    with pytest.raises(ClusterError, match=r"duplicate machine names \['a'\]"):
        ClusterSpec(name="c", reference_speed=1.0, machines=(Machine(id="a", cpus=1),) * 2)


# -- from an SWF header -------------------------------------------------------


def header(**entries: str) -> SwfHeader:
    return SwfHeader(entries=tuple(entries.items()), source="h.swf")


def test_header_max_procs() -> None:
    spec = cluster_from_header(header(MaxProcs="1152", MaxNodes="144", Installation="Blue"))
    assert spec.machines == (Machine(id="node", cpus=1152),)
    assert (spec.name, spec.total_cpus, spec.reference_speed) == ("Blue", 1152, 1.0)


def test_header_max_nodes_only_and_trailing_text() -> None:
    spec = cluster_from_header(header(MaxNodes="338 (batch partition; 512 total)"), name="ctc")
    assert spec.total_cpus == 338
    assert spec.name == "ctc"
    assert cluster_from_header({"MaxNodes": "256"}).total_cpus == 256  # a plain mapping works too


def test_header_split_into_nodes() -> None:
    spec = cluster_from_header(header(MaxProcs="1152", MaxNodes="144"), nodes=True)
    assert len(spec.machines) == 144
    assert spec.machines[0] == Machine(id="node-0", cpus=8)
    assert spec.total_cpus == 1152
    assert cluster_from_header(header(MaxNodes="4"), nodes=True).machines[3] == Machine(
        id="node-3", cpus=1
    )


@pytest.mark.parametrize(
    ("entries", "nodes", "message"),
    [
        ({}, False, "neither MaxProcs nor MaxNodes"),
        ({"MaxProcs": "-1", "MaxNodes": "0"}, False, "neither MaxProcs nor MaxNodes"),
        ({"MaxProcs": "100", "MaxNodes": "7"}, True, "not a multiple of MaxNodes 7"),
        ({"MaxProcs": "100"}, True, "needs MaxNodes"),
        ({"MaxProcs": "many"}, False, "MaxProcs: expected a number"),
    ],
)
def test_header_errors(entries: dict[str, str], nodes: bool, message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        cluster_from_header(header(**entries), nodes)


@pytest.mark.slow
@pytest.mark.skipif(not PWA.is_dir(), reason=f"{PWA} not present")
def test_real_headers() -> None:
    sizes = {
        "CTC-SP2-1996-3.1-cln.swf.gz": 338,
        "KTH-SP2-1996-2.1-cln.swf.gz": 100,
        "SDSC-SP2-1998-4.2-cln.swf.gz": 128,
        "SDSC-BLUE-2000-4.2-cln.swf.gz": 1152,
        "synthetic/lublin_256.swf.gz": 256,
    }
    for name, cpus in sizes.items():
        assert cluster_from_header(read_header(PWA / name)).total_cpus == cpus, name
    blue = cluster_from_header(read_header(PWA / "SDSC-BLUE-2000-4.2-cln.swf.gz"), nodes=True)
    assert {m.cpus for m in blue.machines} == {8}


def test_auto_speed_is_measured_once_by_the_caller() -> None:
    data = {
        "machine": [
            {"name": "a", "cpus": 2, "speed": "auto", "count": 2},
            {"name": "b", "cpus": 1, "speed": 3.0},
        ]
    }
    calls: list[int] = []

    def measured() -> float:
        calls.append(1)
        return 1.75

    spec = parse_cluster(data, auto_speed=measured)
    assert spec.speeds == {"a-0": 1.75, "a-1": 1.75, "b": 3.0}
    assert len(calls) == 1  # once per "auto" entry, whatever its count
    with pytest.raises(ClusterError, match="speed 'auto' is measured only by the live commands"):
        parse_cluster(data)


def test_the_cli_measures_the_host_once() -> None:
    host = HostSpeed()
    first = host()
    assert first > 0
    assert host() == first
    assert host.measured is not None
