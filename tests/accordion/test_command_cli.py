"""``accordion submit -- CMD`` and ``accordion batch SCRIPT``: the specs they send.

The scheduler is not needed to see what a command would send: ``send_one`` is
replaced by a recorder, so each test reads the ``JobSpec`` the command built.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from accordion.cli import app
from accordion.client.command_jobs import directives
from accordion.errors import UserError
from broker.messages import JobSpec

runner = CliRunner()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[JobSpec]:
    specs: list[JobSpec] = []

    def record(spec: JobSpec, **_: object) -> None:
        specs.append(spec)

    monkeypatch.setattr("accordion.commands.live.send_one", record)
    monkeypatch.setattr("accordion.commands.batch.send_one", record)
    return specs


def test_submit_a_command_after_the_double_dash(sent: list[JobSpec], tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "submit",
            "-n",
            "4",
            "-t",
            "1:00",
            "-D",
            str(tmp_path),
            "-o",
            "out-%j.txt",
            "-J",
            "mine",
            "--",
            "./app",
            "--flag",
            "value with spaces",
        ],
    )
    assert result.exit_code == 0, result.output
    (spec,) = sent
    assert (spec.workload, spec.procs, spec.walltime) == ("command", 4, 60.0)
    assert spec.command is not None
    assert spec.command.argv == ("./app", "--flag", "value with spaces")
    assert (spec.command.chdir, spec.command.output, spec.command.name) == (
        str(tmp_path),
        "out-%j.txt",
        "mine",
    )
    assert spec.owner is None  # the scheduler says who it is, not the client


def test_the_working_directory_is_this_one_by_default(
    sent: list[JobSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["submit", "--", "ls", "-l"]).exit_code == 0
    (spec,) = sent
    assert spec.command is not None
    assert (spec.command.chdir, spec.command.output, spec.command.name) == (
        str(tmp_path),
        "accordion-%j.out",
        "ls",
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["submit", "--work", "5", "--", "ls"], "not for a command"),
        (["submit", "--workload", "mpi", "--", "ls"], "not for a command"),
        (["submit", "-o", "x.out"], "go with a command"),
        (["submit", "-o", "x-%q.out", "--", "ls"], "%q is not one of"),
        (["submit", "--iterations", "3", "--", "ls"], "only for --workload mpi"),
        (["submit", "--mpi", "openmpi"], "go with a command"),
        (["submit", "--mpi", "lam", "--", "./app"], "Invalid value for '--mpi'"),
    ],
)
def test_a_bad_submission_is_one_line_and_exit_2(
    sent: list[JobSpec], argv: list[str], says: str
) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert sent == []


SCRIPT = """#!/bin/sh
# a plain comment
#ACCORDION -n 4 -t 2:00
#ACCORDION --output "run %j.log" -J from-script
#ACCORDIONX -n 99
#ACCORDION -A physics   # a comment after the options

echo start
#ACCORDION -n 7
"""


def test_directives_are_read_until_the_first_command() -> None:
    found = directives(SCRIPT)
    assert [(d.line, d.tokens) for d in found] == [
        (3, ("-n", "4", "-t", "2:00")),
        (4, ("--output", "run %j.log", "-J", "from-script")),
        (6, ("-A", "physics")),
    ]
    with pytest.raises(UserError, match="line 2"):
        directives('#!/bin/sh\n#ACCORDION -J "open\n')


def test_batch_reads_directives_and_the_command_line_wins(
    sent: list[JobSpec], tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    result = runner.invoke(app, ["batch", "-n", "2", str(script), "arg1", "-n", "arg3"])
    assert result.exit_code == 0, result.output
    (spec,) = sent
    assert spec.procs == 2  # the command line's, over the script's 4
    assert (spec.walltime, spec.group) == (120.0, "physics")  # the script's
    assert spec.command is not None
    assert spec.command.script == SCRIPT
    # Options stop at the script: the rest is the script's own arguments.
    assert spec.command.argv == ("arg1", "-n", "arg3")
    assert (spec.command.output, spec.command.name) == ("run %j.log", "from-script")


def test_mpi_names_the_library_on_the_command_line_or_in_a_directive(
    sent: list[JobSpec], tmp_path: Path
) -> None:
    result = runner.invoke(app, ["submit", "-n", "4", "--mpi", "openmpi", "--", "./cg", "-i", "9"])
    assert result.exit_code == 0, result.output
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#ACCORDION -n 2 --mpi mpich\n$ACCORDION_MPIRUN ./cg\n")
    result = runner.invoke(app, ["batch", str(script)])
    assert result.exit_code == 0, result.output
    plain = runner.invoke(app, ["submit", "--", "./cg"])
    assert plain.exit_code == 0, plain.output
    program, batch, serial = (s.command for s in sent)
    assert program is not None
    assert (program.mpi, program.argv) == ("openmpi", ("./cg", "-i", "9"))
    assert batch is not None
    assert batch.mpi == "mpich"
    assert serial is not None
    assert serial.mpi is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("echo no shebang\n", "must start with a #! line"),
        ("#!/bin/sh\n#ACCORDION --bogus\n", "line 2: No such option"),
        ("#!/bin/sh\n#ACCORDION --broker mqtt://elsewhere\n", "line 2: --broker is not a job"),
        ("#!/bin/sh\n#ACCORDION -n 0\n", "line 2"),
        ("#!/bin/sh\n#ACCORDION --help\n", "line 2: --help"),
    ],
)
def test_a_bad_script_is_refused_with_its_line(
    sent: list[JobSpec], tmp_path: Path, text: str, says: str
) -> None:
    script = tmp_path / "bad.sh"
    script.write_text(text)
    result = runner.invoke(app, ["batch", str(script)])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert sent == []


def test_watch_and_status_say_how_a_command_ended() -> None:
    from accordion.client.command_jobs import describe_end
    from accordion.commands.live import _watched_line
    from broker.messages import JobEvent
    from broker.vocabulary import JobEventKind

    ok = JobEvent(job_id="a", event=JobEventKind.FINISHED, at=5.0, seq=3, exit_status=0)
    killed = JobEvent(
        job_id="b", event=JobEventKind.FAILED, at=6.0, seq=4, signal=9, detail="part on n1"
    )
    plain = JobEvent(job_id="c", event=JobEventKind.FINISHED, at=7.0, seq=2)
    assert _watched_line(ok) == "t=5.0  job a  finished, exit 0"
    assert _watched_line(killed) == "t=6.0  job b  failed, signal 9 (SIGKILL)  part on n1"
    assert _watched_line(plain) == "t=7.0  job c  finished"
    assert describe_end(plain) == ""
