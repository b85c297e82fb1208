"""Calibration files: each application's measured ``u`` and ``OV``, for the calibrated model.

``python -m bench.mpi`` runs real MPI programs folded (two ranks on one core)
and expanded (one rank per core), fits the two parameters of the execution
model ``1 + (m - 1)(u + OV)`` per program and writes them here; ``accordion
simulate --execution-model calibrated --calibration FILE`` reads them back
(``model.execution``, the ``calibrated`` kind). The file is TOML::

    name = "openmpi"                 # the calibration's name, recorded in summaries
    source = "bench.mpi on host ..." # optional: how it was measured

    [app.cg]
    u = 0.97                         # compute over total time, expanded, in (0, 1]
    ov = 0.03                        # formula (4)'s overhead, >= 0

    [app.cg.measured]                # optional: the numbers the fit came from
    ratio_yield = 2.0                # (read back as they are; the model ignores them)

Every fault is a :class:`CalibrationError` naming the file and the entry, and
unknown keys are errors, as in cluster files: a misspelt ``ov`` must not
silently read as 0.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from model.execution import AppParams, Calibration

__all__ = ["CalibrationError", "CalibrationFile", "dump_calibration", "load_calibration"]

_TOP_KEYS: Final = frozenset({"name", "source", "app"})
_APP_KEYS: Final = frozenset({"u", "ov", "measured"})
_NAME: Final = re.compile(r"[A-Za-z0-9_-]+")
"""An application or calibration name: a bare TOML key, and one word on a command line."""


class CalibrationError(ValueError):
    """A calibration file that cannot be used (the message names the file and entry)."""


@dataclass(frozen=True, slots=True)
class CalibrationFile:
    """A calibration with what the file says of its making."""

    calibration: Calibration
    source: str = ""
    #: Per application, the measurements its fit came from (``[app.NAME.measured]``).
    measured: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CalibrationError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _table(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise CalibrationError(f"{where}: expected a table, got {value!r}")
    return value


def parse_calibration(data: Mapping[str, object], *, source: str) -> CalibrationFile:
    """A calibration from TOML already read (see the module docstring for its layout)."""
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise CalibrationError(f"{source}: unknown key(s) {unknown}; known: {sorted(_TOP_KEYS)}")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CalibrationError(f"{source}: name must be one word of [A-Za-z0-9_-], got {name!r}")
    note = data.get("source", "")
    if not isinstance(note, str):
        raise CalibrationError(f"{source}: source must be text, got {note!r}")
    apps = _table(data.get("app", {}), f"{source}: [app]")
    if not apps:
        raise CalibrationError(f"{source}: no [app.NAME] table: a calibration needs one")
    params: dict[str, AppParams] = {}
    measured: dict[str, dict[str, float]] = {}
    for app, entry in apps.items():
        where = f"{source}: [app.{app}]"
        if not _NAME.fullmatch(app):
            raise CalibrationError(f"{where}: an application name is one word of [A-Za-z0-9_-]")
        table = _table(entry, where)
        unknown = sorted(set(table) - _APP_KEYS)
        if unknown:
            raise CalibrationError(f"{where}: unknown key(s) {unknown}; known: {sorted(_APP_KEYS)}")
        if "u" not in table:
            raise CalibrationError(f"{where}: u is required")
        try:
            params[app] = AppParams(
                u=_number(table["u"], f"{where} u"), ov=_number(table.get("ov", 0.0), f"{where} ov")
            )
        except ValueError as exc:
            raise CalibrationError(f"{where}: {exc}") from None
        numbers = _table(table.get("measured", {}), f"{where}.measured")
        measured[app] = {k: _number(v, f"{where}.measured {k}") for k, v in numbers.items()}
    return CalibrationFile(Calibration.of(name, params), note, measured)


def load_calibration(path: str | os.PathLike[str]) -> CalibrationFile:
    """Read a calibration file; a :class:`CalibrationError` naming it when it cannot be used."""
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise CalibrationError(f"{source}: no such calibration file") from None
    except OSError as exc:
        raise CalibrationError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise CalibrationError(f"{source}: not valid TOML: {exc}") from exc
    return parse_calibration(data, source=source)


def _toml_string(text: str) -> str:
    # TOML basic strings share JSON's escapes for the characters that need one.
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def dump_calibration(cal: CalibrationFile, *, header: str = "") -> str:
    """The file's text; :func:`parse_calibration` of it gives ``cal`` back exactly."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"name = {_toml_string(cal.calibration.name)}"]
    if cal.source:
        lines.append(f"source = {_toml_string(cal.source)}")
    for app, params in cal.calibration.apps:
        if not _NAME.fullmatch(app):
            raise CalibrationError(f"application {app!r} is not one word of [A-Za-z0-9_-]")
        # repr() of a float is TOML and round-trips exactly.
        lines += ["", f"[app.{app}]", f"u = {params.u!r}", f"ov = {params.ov!r}"]
        numbers = cal.measured.get(app, {})
        if numbers:
            lines += ["", f"[app.{app}.measured]"]
            lines += [f"{key} = {float(value)!r}" for key, value in numbers.items()]
    return "\n".join(lines) + "\n"
