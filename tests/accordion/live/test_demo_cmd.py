"""``accordion demo``: the demo workload on a cluster already running, live against the twin."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from tests.accordion.live.conftest import local_cluster
from tests.integration.conftest import BrokerEndpoint

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_the_demo_runs_on_a_running_cluster_and_prints_the_table(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    with local_cluster(mosquitto, tmp_path, time_scale=600.0) as cluster:
        args = [
            "demo",
            f"--journal={cluster.journal}",
            f"--metrics={cluster.scheduler_metrics}",
            "--jobs=8",
            "--no-progress",
            f"--broker={cluster.broker_url}",
            f"--root={cluster.root}",
        ]
        first = CliRunner().invoke(app, args)
        assert first.exit_code == 0, first.output
        assert "the live cluster against the twin" in first.output
        assert "2 agents" in first.output  # the twin is the cluster online
        # A second run on the same journal counts only its own jobs.
        second = CliRunner().invoke(app, args)
        assert second.exit_code == 0, second.output


def test_a_missing_journal_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", f"--journal={tmp_path / 'none.sqlite'}"])
    assert result.exit_code == 2
    assert "no such journal" in result.output
