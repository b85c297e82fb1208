"""Which application each job of a trace runs: SWF field 14 named in the header.

The Standard Workload Format numbers executables (field 14, "Executable
(Application) Number", 1 .. the number of applications, -1 unknown) but does
not name them. A trace whose jobs are matched to programs (MPI kernels, for
the ``calibrated`` execution model) names its numbers in one header line::

    ; Applications: 1=cg 2=halo 3=ep 4=ring

``workload.swf_load.load_jobs`` then sets each job's ``Job.app`` to the name of
its number. Without the line, or for a number the line does not name, a job
has no application (``Job.app`` None), and the calibrated model runs it under
the ``linear`` reading with its own ``u``. Other SWF readers see one more
comment line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

HEADER_KEY: Final = "Applications"
_ITEM: Final = re.compile(r"([1-9][0-9]*)=([A-Za-z0-9_-]+)")


def apps_to_text(apps: Mapping[int, str]) -> str:
    """The header value naming ``apps`` (number -> name); :func:`apps_from_text` reads it."""
    text = " ".join(f"{number}={name}" for number, name in sorted(apps.items()))
    apps_from_text(text)  # the same checks on the way out as on the way in
    return text


def apps_from_text(text: str) -> dict[int, str]:
    """Parse a :func:`apps_to_text` value; a ``ValueError`` quoting it when malformed."""
    apps: dict[int, str] = {}
    for item in text.split():
        match = _ITEM.fullmatch(item)
        if match is None:
            raise ValueError(
                f"{HEADER_KEY} {text!r}: expected NUMBER=NAME items (number >= 1, name of "
                f"[A-Za-z0-9_-]), got {item!r}"
            )
        number = int(match.group(1))
        if number in apps:
            raise ValueError(f"{HEADER_KEY} {text!r}: number {number} named twice")
        apps[number] = match.group(2)
    if not apps:
        raise ValueError(f"{HEADER_KEY}: the header line names no application")
    return apps
