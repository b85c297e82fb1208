"""The agent's state directory: records, pid files, the lock, the checks on what is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.survival.state import (
    Forked,
    PartRecord,
    StateDir,
    StateError,
    default_state_dir,
    renew,
    start_time,
)


def record(**changes: object) -> PartRecord:
    fields: dict[str, object] = {
        "job_id": "j1",
        "attempt": 2,
        "cpus": 2,
        "slots": (0, 1),
        "argv": ("--job-id=j1", "--attempt=2"),
        "budget": 10.0,
        "rate": 0.5,
        "changed": 123.0,
    }
    fields.update(changes)
    return PartRecord(**fields)  # type: ignore[arg-type]


def test_a_record_round_trips() -> None:
    r = record(resized=True)
    assert PartRecord.load(r.dump()) == r


@pytest.mark.parametrize(
    "data",
    [
        b"\x00garbage",
        b"[]",
        b'{"version": 2}',
        b'{"version": 1, "job_id": 7}',
        record().dump().replace(b'"cpus": 2', b'"cpus": true'),
        record().dump().replace(b'"rate": 0.5', b'"rate": 0'),
        record().dump().replace(b'"budget": 10.0', b'"budget": NaN'),
        record().dump().replace(b'"job_id": "j1"', b'"job_id": "../x"'),
    ],
)
def test_a_record_that_is_not_one_is_refused(data: bytes) -> None:
    with pytest.raises(StateError):
        PartRecord.load(data)


def test_pid_files_are_checked() -> None:
    forked = Forked(1234, 99, 1.5, 2.5)
    assert Forked.load(forked.dump()) == forked
    for bad in (b"", b"1 2 3", b"one 2 3 4", b"1 2 3 4", b"5 2 inf 4"):
        with pytest.raises(StateError):
            Forked.load(bad)


def test_start_time_tells_processes_apart() -> None:
    mine = start_time(os.getpid())
    assert mine is not None
    assert start_time(os.getpid()) == mine
    assert start_time(2**22 + 1) is None  # beyond pid_max: no such process


def test_the_directory_is_private_and_its_own(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "s")
    state.create()
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open").chmod(0o755)
    with pytest.raises(StateError, match="0700"):
        StateDir(tmp_path / "open").create()
    with pytest.raises(StateError, match="too deep"):
        StateDir(tmp_path / ("x" * 120)).create()


def test_one_agent_per_directory(tmp_path: Path) -> None:
    first, second = StateDir(tmp_path), StateDir(tmp_path)
    first.create()
    first.lock(patience=0)
    with pytest.raises(StateError, match="another agent"):
        second.lock(patience=0)
    first.unlock()
    second.lock(patience=0)
    second.unlock()


def test_part_files_are_found_and_removed(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.create()
    state.write_record(record())
    renew(state.part_lease("j1", 2), 100.0)
    assert state.part_lease("j1", 2).stat().st_mtime == 100.0
    (state.parts / ".tmp-abc").write_text("half a record")
    assert state.part_keys() == ["j1@2"]
    got, forked, why = state.read("j1@2")
    assert (got, forked) == (record(), None)
    assert why is not None
    assert "never forked" in why
    assert not state.has_pid_file("j1@2")
    state.remove_part("j1", 2)
    assert state.part_keys() == []


def test_the_default_directory_is_per_user_and_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert default_state_dir("m1").name == "m1"
    assert f"accordion-{os.getuid()}" in str(default_state_dir("m1"))
