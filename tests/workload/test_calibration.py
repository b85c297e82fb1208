"""Calibration files (workload.calibration) and the trace header that names applications."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.execution import AppParams, Calibration
from workload.applications import apps_from_text, apps_to_text
from workload.calibration import (
    CalibrationError,
    CalibrationFile,
    dump_calibration,
    load_calibration,
)
from workload.swf import SwfError
from workload.swf_load import load_jobs

CAL = CalibrationFile(
    Calibration.of("openmpi", {"cg": AppParams(0.97, 0.03), "cg_py": AppParams(0.8125, 0.1)}),
    'bench.mpi on "host"',
    {"cg": {"ratio_yield": 2.0, "u_measured": 0.97}},
)


def test_a_dumped_calibration_reads_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "cal.toml"
    path.write_text(dump_calibration(CAL, header="two lines\nof header"))
    assert path.read_text().startswith("# two lines\n# of header\n")
    back = load_calibration(path)
    assert back.calibration == CAL.calibration
    assert back.source == CAL.source
    assert back.measured["cg"] == CAL.measured["cg"]


def test_the_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "quiet-host.toml"
    path.write_text("[app.ring]\nu = 0.05\n")
    cal = load_calibration(path).calibration
    assert cal.name == "quiet-host"
    assert cal.get("ring") == AppParams(0.05, 0.0)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name = 'x'\n", r"no \[app.NAME\] table"),
        ("[app.cg]\nov = 0.1\n", "u is required"),
        ("[app.cg]\nu = 0.5\noverhead = 0.1\n", r"unknown key\(s\) \['overhead'\]"),
        ("[app.cg]\nu = 1.5\n", r"\[app.cg\]: u must be in \(0, 1\]"),
        ("[app.cg]\nu = 'high'\n", "expected a finite number"),
        ("[app.cg]\nu = 0.5\nov = -1\n", "ov must be"),
        ("[app.cg]\nu = 0.5\n[app.cg.measured]\nx = 'a'\n", "expected a finite number"),
        ("colour = 1\n[app.cg]\nu = 0.5\n", "unknown key"),
        ("name = 'two words'\n[app.cg]\nu = 0.5\n", "name must be one word"),
        ("[app.'c g']\nu = 0.5\n", "one word"),
        ("[app\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_one_error_naming_file_and_entry(
    tmp_path: Path, text: str, match: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=match) as err:
        load_calibration(path)
    assert str(err.value).startswith(str(path))


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="no such calibration file"):
        load_calibration(tmp_path / "absent.toml")


def test_the_applications_header_round_trips() -> None:
    apps = {2: "halo", 1: "cg", 10: "cg_py"}
    assert apps_to_text(apps) == "1=cg 2=halo 10=cg_py"
    assert apps_from_text(apps_to_text(apps)) == apps


@pytest.mark.parametrize("text", ["", "1=cg 1=halo", "0=cg", "1:cg", "1=c.g"])
def test_a_bad_applications_header_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Applications"):
        apps_from_text(text)


SWF = """\
; MaxProcs: 4
; Applications: 1=cg 2=halo
1 0 -1 10 2 -1 -1 2 10 -1 1 1 1 1 -1 -1 -1 -1
2 1 -1 10 2 -1 -1 2 10 -1 1 1 1 2 -1 -1 -1 -1
3 2 -1 10 2 -1 -1 2 10 -1 1 1 1 7 -1 -1 -1 -1
4 3 -1 10 2 -1 -1 2 10 -1 1 1 1 -1 -1 -1 -1 -1
"""


def test_a_trace_names_its_jobs_applications_by_executable_number(tmp_path: Path) -> None:
    path = tmp_path / "apps.swf"
    path.write_text(SWF)
    jobs = load_jobs(path).jobs
    # Numbers the header does not name, and unknown executables (-1), name nothing.
    assert [j.app for j in jobs] == ["cg", "halo", None, None]
    plain = tmp_path / "plain.swf"
    plain.write_text(SWF.replace("; Applications: 1=cg 2=halo\n", ""))
    assert [j.app for j in load_jobs(plain).jobs] == [None] * 4


def test_a_trace_with_a_bad_applications_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.swf"
    path.write_text(SWF.replace("2=halo", "2=halo 2=ep"))
    with pytest.raises(SwfError, match="named twice"):
        load_jobs(path)
