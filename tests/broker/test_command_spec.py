"""A user's command on the wire: what decodes, what is refused, and its output patterns."""

from __future__ import annotations

import msgspec
import pytest

from broker.codec import WireError, decode, encode
from broker.command_spec import (
    MAX_ARG,
    MAX_ARGS,
    MAX_SCRIPT,
    CommandSpec,
    PatternError,
    check_pattern,
    expand_pattern,
)
from broker.messages import (
    AgentOnline,
    JobEvent,
    JobSpec,
    MachineSpec,
    PartFinished,
    StartPart,
    SubmitJobs,
)
from broker.vocabulary import CommandUsers, JobEventKind


def submit(command: object, workload: str = "command") -> bytes:
    """A SubmitJobs payload built as raw data, so the wire (not a constructor) judges it."""
    job = {
        "id": "j",
        "procs": 1,
        "walltime": 1.0,
        "work": 1.0,
        "workload": workload,
        "command": command,
    }
    return msgspec.msgpack.encode({"kind": "submit_jobs", "v": 2, "jobs": [job]})


def test_a_command_and_a_script_decode_with_their_defaults() -> None:
    message = decode(submit({"argv": ["./app", "-x"], "chdir": "/home/a"}))
    assert isinstance(message, SubmitJobs)
    command = message.jobs[0].command
    assert command is not None
    assert (command.argv, command.output, command.error) == (
        ("./app", "-x"),
        "accordion-%j.out",
        None,
    )
    script = decode(submit({"script": "#!/bin/sh\necho hi\n", "argv": ["a"], "chdir": "/"}))
    assert isinstance(script, SubmitJobs)


@pytest.mark.parametrize(
    "command",
    [
        {"chdir": "/tmp"},  # nothing to run
        {"argv": [""], "chdir": "/tmp"},  # an empty program
        {"argv": ["a\x00b"], "chdir": "/tmp"},  # execve cannot pass a NUL
        {"argv": ["ls"], "chdir": "relative/dir"},
        {"argv": ["ls"], "chdir": ""},
        {"argv": ["ls"]},  # no working directory
        {"script": "echo no shebang\n", "chdir": "/tmp"},
        {"script": "#!/bin/sh\n\x00", "chdir": "/tmp"},
        {"argv": ["ls"], "chdir": "/tmp", "output": "out-%q"},  # unknown placeholder
        {"argv": ["ls"], "chdir": "/tmp", "error": "trailing%"},
        {"argv": ["ls"], "chdir": "/tmp", "name": "a/b"},
        {"argv": ["x" * (MAX_ARG + 1)], "chdir": "/tmp"},
        {"argv": ["x"] * (MAX_ARGS + 1), "chdir": "/tmp"},
        {"script": "#!" + "x" * MAX_SCRIPT, "chdir": "/tmp"},
        {"argv": ["ls"], "chdir": "/tmp", "env": ["PATH=/"]},  # an unknown field
    ],
)
def test_a_bad_command_does_not_decode(command: dict[str, object]) -> None:
    with pytest.raises(WireError) as caught:
        decode(submit(command))
    assert caught.value.reason == "invalid"


def test_workload_command_and_a_command_go_together() -> None:
    with pytest.raises(WireError):
        decode(submit(None))
    with pytest.raises(WireError):
        decode(submit({"argv": ["ls"], "chdir": "/"}, workload="sleep"))


def test_patterns_expand_as_sbatch_writes_them() -> None:
    values = {"j": "42", "u": "alice", "x": "run", "N": "n1", "n": "0"}
    assert expand_pattern("%x-%j.%u.%N.%n.%%", values) == "run-42.alice.n1.0.%"
    assert expand_pattern("plain.out", values) == "plain.out"
    assert check_pattern("100%%") == "100%%"
    with pytest.raises(PatternError):
        check_pattern("%t")


def test_the_new_fields_make_the_round_trip() -> None:
    spec = JobSpec(
        id="j",
        procs=2,
        walltime=5,
        work=5,
        workload="command",
        owner="alice",
        command=CommandSpec(argv=("true",), chdir="/"),
    )
    start = StartPart(job=spec, cpus=2)
    assert decode(encode(start)) == start
    finished = PartFinished(
        job_id="j", agent_id="a", exit_code=5, at=1.0, reason="failed", exit_status=3
    )
    assert decode(encode(finished)) == finished
    event = JobEvent(job_id="j", event=JobEventKind.FAILED, at=1.0, seq=3, signal=9)
    assert decode(encode(event)) == event
    online = AgentOnline(
        machine=MachineSpec(id="a", cpus=1),
        incarnation="i",
        running=(),
        commands=CommandUsers.AGENT,
        runs_as="bob",
    )
    assert decode(encode(online)) == online


@pytest.mark.parametrize(("status", "signal"), [(256, None), (-1, None), (None, 0), (None, 65)])
def test_an_exit_status_or_signal_out_of_range_does_not_decode(
    status: int | None, signal: int | None
) -> None:
    raw = {
        "kind": "part_finished",
        "v": 2,
        "job_id": "j",
        "agent_id": "a",
        "exit_code": 1,
        "at": 1.0,
        "reason": "failed",
        "exit_status": status,
        "signal": signal,
    }
    with pytest.raises(WireError):
        decode(msgspec.msgpack.encode(raw))
