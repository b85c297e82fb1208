"""A command part's plan and status files, and the admin's user map: read with checks."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from nodeagent.agent.accounts import (
    CommandRefusedError,
    UserMap,
    UserMapError,
    UserMapFile,
    mapped_account,
)
from nodeagent.launch.command_plan import CommandPlan, CommandStatus, PlanError, RunAs


def plan(**changes: object) -> CommandPlan:
    fields: dict[str, object] = {
        "batch": True,
        "argv": ("sh", "-c", "echo hi"),
        "chdir": "/tmp",
        "stdout": "/tmp/out",
        "stderr": None,
        "env": (("A", "1"), ("PATH", "/bin")),
        "run_as": RunAs(
            user="u", uid=1000, gid=1000, groups=(1000, 27), home="/h", shell="/bin/sh"
        ),
        "cgroup": "/sys/fs/cgroup/x",
        "cores": (0, 1),
        "term_grace": 5.0,
        "status_file": "/state/j@1.status",
        "job_dir": "/jobs/j@1",
    }
    fields.update(changes)
    return CommandPlan(**fields)  # type: ignore[arg-type]


def test_a_plan_reads_back_as_written() -> None:
    written = plan()
    assert CommandPlan.load(written.dump()) == written
    holder = plan(batch=False, argv=(), run_as=None, cgroup=None)
    assert CommandPlan.load(holder.dump()) == holder
    mpi = plan(mpi_ranks=4)
    assert CommandPlan.load(mpi.dump()) == mpi


@pytest.mark.parametrize(
    "change",
    [
        {"chdir": "relative"},
        {"stdout": "out.txt"},
        {"argv": ()},  # a batch part with nothing to run
        {"argv": ("a\x00",)},
        {"env": (("A=B", "1"),)},
        {"term_grace": float("nan")},
        {"mpi_ranks": -1},
    ],
)
def test_a_bad_plan_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(PlanError):
        plan(**change)


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        json.dumps({"version": 2}).encode(),
        json.dumps({**json.loads(plan().dump()), "argv": "sh"}).encode(),
        json.dumps({**json.loads(plan().dump()), "batch": 1}).encode(),
        json.dumps({**json.loads(plan().dump()), "run_as": {"user": "u"}}).encode(),
        json.dumps({**json.loads(plan().dump()), "env": [["A"]]}).encode(),
        json.dumps({**json.loads(plan().dump()), "mpi_ranks": "2"}).encode(),
    ],
)
def test_a_plan_file_that_does_not_read_is_no_plan(data: bytes) -> None:
    with pytest.raises(PlanError):
        CommandPlan.load(data)


def test_a_status_is_an_exit_status_or_a_signal() -> None:
    for status in (CommandStatus(exit_status=0), CommandStatus(signal=9)):
        assert CommandStatus.load(status.dump()) == status
    assert CommandStatus.of_wait_status(3 << 8) == CommandStatus(exit_status=3)
    assert CommandStatus.of_wait_status(9) == CommandStatus(signal=9)
    assert CommandStatus(signal=9).describe() == "was killed by signal 9 (SIGKILL)"
    ranked = CommandStatus(exit_status=3, first_rank=1)
    assert CommandStatus.load(ranked.dump()) == ranked
    assert ranked.dump() == b"exit 3 rank 1\n"
    assert ranked.describe() == "exited with status 3, rank 1 ended first"
    # A program that succeeded: which rank ended first means nothing.
    assert CommandStatus(exit_status=0, first_rank=1).describe() == "exited with status 0"
    killed = CommandStatus(signal=11, first_rank=0)
    assert killed.describe() == "was killed by signal 11 (SIGSEGV), rank 0 ended first"
    for bad in (
        b"exit",
        b"exit x",
        b"quit 3",
        b"exit 300",
        b"signal 0",
        b"exit 3 rank",
        b"exit 3 node 1",
        b"exit 3 rank -1",
        b"exit 3 rank 1 rank 2",
    ):
        with pytest.raises(PlanError):
            CommandStatus.load(bad)
    with pytest.raises(PlanError):
        CommandStatus(exit_status=1, signal=2)


def test_a_user_map_reads_pairs_the_wildcard_and_comments() -> None:
    mapping = UserMap.parse("# logins\nalice alice  # herself\ncarol projects\n\n* *\n")
    assert mapping.account("alice") == "alice"
    assert mapping.account("carol") == "projects"
    assert mapping.account("dave") == "dave"  # the wildcard: the same name
    assert mapping.explicit("carol")
    assert not mapping.explicit("dave")
    assert UserMap.parse("alice alice\n").account("dave") is None


@pytest.mark.parametrize(
    "text", ["alice\n", "alice a b\n", "alice a\nalice b\n", "* alice\n", "alice *\n"]
)
def test_a_bad_user_map_is_refused_with_its_line(text: str) -> None:
    with pytest.raises(UserMapError, match="line"):
        UserMap.parse(text)


def test_a_user_map_others_may_write_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "users.map"
    path.write_text("alice alice\n")
    path.chmod(0o666)
    with pytest.raises(UserMapError, match="writable by others"):
        UserMapFile(path)
    path.chmod(0o644)
    assert UserMapFile(path).load().account("alice") == "alice"


def test_a_changed_user_map_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "users.map"
    path.write_text("alice alice\n")
    path.chmod(0o644)
    users = UserMapFile(path)
    path.write_text("alice alice\nbob bob\n# and a longer file\n")
    assert users.load().account("bob") == "bob"
    path.write_text("broken line here\n")
    with pytest.raises(UserMapError):
        users.load()
    with pytest.raises(CommandRefusedError, match="user map cannot be used"):
        mapped_account("alice", users)


def test_root_only_by_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "users.map"
    path.write_text("* *\n")
    path.chmod(0o644)
    root = pwd.getpwuid(0).pw_name
    with pytest.raises(CommandRefusedError, match="root needs a line of its own"):
        mapped_account(root, UserMapFile(path))
    path.write_text(f"{root} {root}\n* *\n")
    assert mapped_account(root, UserMapFile(path)).uid == 0
    assert os.getgrouplist(root, 0)  # its groups come with it
