"""The launch contract: an adoption record's options describe the same launch on both sides.

An agent of this version must adopt the parts a killed agent of an earlier
version left running: their records keep the job module's options
(``Launch.argv``), so those options must parse to the same launch here and be
written the same way. The records below were written by the version that
built the launch in ``nodeagent.launch.spawn`` and parsed it with the job
module's own parser.
"""

from __future__ import annotations

import pytest

from model.execution import ExecutionModel, ModelKind
from nodeagent.launch.contract import Launch, LaunchError, MpiParams
from nodeagent.survival.state import PartRecord

SLEEP_RECORD = (
    b'{"version": 1, "job_id": "j1", "attempt": 3, "cpus": 2, "slots": [0, 1], "argv": '
    b'["--root=accordion/v1", "--agent=node1", "--job-id=j1", "--procs=4", "--cpus=2", '
    b'"--pace=0.75", "--ref-speed=1.25", "--cpu-util=0.5", "--work=123.5", '
    b'"--time-scale=100.0", "--workload=sleep", "--attempt=3", "--execution-model=paper", '
    b'"--overhead=0.1", "--ov-min=0.05", "--ov-max=0.2", "--model-seed=7", '
    b'"--start-at=1700000000.125", "--lease-file=/run/s/parts/j1@3.lease", "--lease=8.0", '
    b'"--relay-socket=/run/s/relay.sock", '
    b'"--failure-file=/tmp/accordion-node1-abcdef01-j1-3.failure"], '
    b'"budget": 42.0, "rate": 0.5443323166459444, "changed": 1234.5, "resized": false}'
)
SLEEP = Launch(
    root="accordion/v1",  # the root the record names, whatever today's default
    agent="node1",
    job_id="j1",
    procs=4,
    cpus=2,
    pace=0.75,
    work=123.5,
    ref_speed=1.25,
    cpu_util=0.5,
    time_scale=100.0,
    start_at=1700000000.125,
    attempt=3,
    lease_file="/run/s/parts/j1@3.lease",
    lease=8.0,
    execution=ExecutionModel(kind=ModelKind.PAPER, overhead=0.1, ov_min=0.05, ov_max=0.2, seed=7),
    failure_file="/tmp/accordion-node1-abcdef01-j1-3.failure",
    relay_socket="/run/s/relay.sock",
)
MPI_RECORD = (
    b'{"version": 1, "job_id": "m2", "attempt": 1, "cpus": 4, "slots": [2, 3, 4, 5], "argv": '
    b'["--root=accordion/v1", "--agent=node1", "--job-id=m2", "--procs=8", "--cpus=4", '
    b'"--pace=1.0", "--ref-speed=1.0", "--cpu-util=1.0", "--work=60.0", '
    b'"--time-scale=1000.0", "--workload=mpi", "--attempt=1", "--execution-model=linear", '
    b'"--overhead=0.0", "--ov-min=0.0", "--ov-max=1.0", "--model-seed=0", '
    b'"--start-at=1700000001.5", "--lease-file=/run/s/parts/m2@1.lease", "--lease=8.0", '
    b'"--relay-socket=/run/s/relay.sock", "--iterations=20", "--compute=0.05", '
    b'"--message-bytes=4096", "--pattern=barrier", "--ranks=4", "--rank-offset=4", '
    b'"--total-ranks=8", "--part=1", "--parts=2", '
    b'"--failure-file=/tmp/accordion-node1-abcdef01-m2-1.failure"], '
    b'"budget": 42.0, "rate": 0.5, "changed": 1234.5, "resized": true}'
)
MPI = Launch(
    root="accordion/v1",
    agent="node1",
    job_id="m2",
    procs=8,
    cpus=4,
    pace=1.0,
    work=60.0,
    time_scale=1000.0,
    start_at=1700000001.5,
    workload="mpi",
    attempt=1,
    lease_file="/run/s/parts/m2@1.lease",
    lease=8.0,
    relay_socket="/run/s/relay.sock",
    mpi=MpiParams(iterations=20, compute=0.05, message_bytes=4096, pattern="barrier"),
    ranks=4,
    rank_offset=4,
    total_ranks=8,
    part=1,
    parts=2,
    failure_file="/tmp/accordion-node1-abcdef01-m2-1.failure",
)


@pytest.mark.parametrize(("data", "launch"), [(SLEEP_RECORD, SLEEP), (MPI_RECORD, MPI)])
def test_a_record_of_the_earlier_version_describes_the_same_launch(
    data: bytes, launch: Launch
) -> None:
    record = PartRecord.load(data)
    assert Launch.from_argv(record.argv) == launch
    # Written again by this version, the record is the same, byte for byte.
    assert tuple(launch.argv()) == record.argv
    assert launch.rate() == record.rate
    again = PartRecord(
        job_id=record.job_id,
        attempt=record.attempt,
        cpus=record.cpus,
        slots=record.slots,
        argv=tuple(launch.argv()),
        budget=record.budget,
        rate=launch.rate(),
        changed=record.changed,
        resized=record.resized,
    )
    assert again.dump() == data


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--agent=a", "--procs=1", "--cpus=1", "--pace=1", "--work=1"], "--job-id"),
        ([*SLEEP.argv(), "--procs=x"], "invalid int value"),
        ([*SLEEP.argv(), "--host=broker"], "unrecognized arguments"),
        ([*SLEEP.argv(), "-h"], "unrecognized arguments"),
        ([*SLEEP.argv(), "--cpus=1"], "MPL"),
    ],
)
def test_options_that_describe_no_launch_are_a_launch_error(argv: list[str], why: str) -> None:
    # An error, not argparse's exit: an adopting agent refuses that record and goes on.
    with pytest.raises(LaunchError, match=why):
        Launch.from_argv(argv)
