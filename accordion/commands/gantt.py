"""``accordion gantt``: the schedule as a picture, from a twin run or a live cluster.

``accordion gantt RUN_DIR`` draws a twin run (the directory ``simulate
--out`` or ``compare`` wrote; ``--policy`` picks one of a comparison's runs,
``--window START:END`` a span of trace seconds). ``accordion gantt --live``
draws the live cluster at ``--broker``/``--root`` as the login sees it: its
running jobs with their history of resizes, and the plan ahead
(:mod:`accordion.gantt.live`). Each writes a PNG and a self-contained HTML
file (zoom, a tooltip per job) beside each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accordion.client.live_client import DEFAULT_BROKER, DEFAULT_TIMEOUT, connect, run_async
from accordion.commands.options import BrokerOpt, RootOpt, TimeoutOpt
from accordion.display import out_console
from accordion.errors import UserError, user_errors
from accordion.gantt.bars import Gantt
from accordion.gantt.html import write_html
from accordion.gantt.layout import lay_out
from accordion.gantt.live import LiveTimeline, fetch_timeline
from accordion.gantt.png import write_png
from accordion.gantt.twin_run import TimeWindow, load_twin_run, pick_run
from broker.topics import DEFAULT_ROOT


def gantt(  # noqa: PLR0917 (typer reads the options from the parameters)
    run_dir: Annotated[
        Path | None,
        typer.Argument(help="a twin run's output directory (simulate --out, compare --out)"),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="draw the live cluster at --broker instead")
    ] = False,
    policy: Annotated[
        str | None, typer.Option("--policy", "-p", help="which run of a comparison to draw")
    ] = None,
    window: Annotated[
        str | None,
        typer.Option("--window", help="only jobs running within START:END trace seconds"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="write OUT.png and OUT.html (default: RUN_DIR/POLICY.gantt, or gantt-live)",
        ),
    ] = None,
    png: Annotated[bool, typer.Option(help="write the PNG")] = True,
    html: Annotated[bool, typer.Option(help="write the interactive HTML")] = True,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Draw the schedule: machines and CPUs against time, one bar per job's part."""
    with user_errors():
        if live == (run_dir is not None):
            raise UserError("give a twin run's directory, or --live for the live cluster")
        if not (png or html):
            raise UserError("--no-png and --no-html leave nothing to write")
        if run_dir is not None:
            chart = load_twin_run(run_dir, policy, TimeWindow.parse(window))
            stem = out or run_dir / f"{pick_run(run_dir, policy)}.gantt"
        else:
            if policy is not None or window is not None:
                raise UserError("--policy and --window are for a twin run's directory")

            async def ask() -> LiveTimeline:
                async with connect(broker, root, timeout=timeout) as client:
                    return await fetch_timeline(client)

            chart = run_async(ask()).gantt(f"live cluster at {broker}, root {root}")
            stem = out or Path("gantt-live")
        for path in write(chart, stem, png=png, html=html):
            out_console.print(f"wrote {path}", highlight=False)


def write(chart: Gantt, stem: Path, *, png: bool = True, html: bool = True) -> list[Path]:
    """``stem``.png and ``stem``.html of ``chart`` (the ones asked for)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    layout = lay_out(chart)
    written: list[Path] = []
    if png:
        written.append(stem.with_name(stem.name + ".png"))
        write_png(written[-1], chart, layout=layout)
    if html:
        written.append(stem.with_name(stem.name + ".html"))
        write_html(written[-1], chart, layout=layout)
    return written


def register(app: typer.Typer) -> None:
    app.command()(gantt)
