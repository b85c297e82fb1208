"""The Gantt chart as one self-contained interactive HTML file (Bokeh, inline resources).

Why Bokeh: a Gantt chart is rectangles, and Bokeh's ``quad`` glyph draws
them from columns on an HTML canvas, with a hover tool that finds the
rectangle under the pointer through a spatial index, so 10,000 jobs (tens
of thousands of rectangles) stay smooth to zoom and pan. BokehJS is
embedded in the file (``resources.INLINE``), so it opens offline.

The figure has two renderers, run and planned, each fed by a
``ColumnDataSource`` named ``run`` and ``planned`` (one row per rectangle,
``style.table``'s columns), and a ``Span`` named ``now``. The live page
(``accordion.ui``) embeds the same figure and replaces those sources' data
and the span's location as the cluster changes, which keeps the user's zoom.

Once BokehJS has built the document, the page's ``<body>`` gets
``data-gantt-ready="1"``: what the browser test and the bench wait for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from accordion.gantt.bars import Gantt
from accordion.gantt.layout import Layout, lay_out
from accordion.gantt.style import (
    LATE,
    NOW,
    PLANNED_ALPHA,
    RUN_ALPHA,
    Table,
    is_planned,
    table,
    time_unit,
)

if TYPE_CHECKING:
    from bokeh.document import Document
    from bokeh.model import Model

READY_JS = "document.body.dataset.ganttReady = '1';"
TOOLTIPS = [
    ("job", "@job"),
    ("user", "@user"),
    ("machine", "@machine"),
    ("CPUs here", "@cpus"),
    ("from", "@left{0,0.0} s"),
    ("to", "@right{0,0.0} s"),
    ("kind", "@kind"),
    ("deadline", "@deadline"),
]


def source_data(rows: Table, unit: float) -> dict[str, list[Any]]:
    """A ``ColumnDataSource``'s columns for ``rows``: x in ``unit``, tooltips in seconds."""
    return {
        "x0": [t / unit for t in rows.left],
        "x1": [t / unit for t in rows.right],
        "bottom": rows.bottom,
        "top": rows.top,
        "left": rows.left,
        "right": rows.right,
        "job": rows.job,
        "user": rows.user,
        "machine": rows.machine,
        "cpus": rows.cpus,
        "kind": rows.kind,
        "deadline": rows.deadline,
        "colour": rows.colour,
        "outline": [
            LATE if late else colour for late, colour in zip(rows.late, rows.colour, strict=True)
        ],
        "outline_width": [2.0 if late else 0.5 for late in rows.late],
    }


NUMERIC = ("x0", "x1", "bottom", "top", "left", "right", "cpus", "outline_width")


def packed(data: dict[str, list[Any]]) -> dict[str, Any]:
    """``data`` with its numeric columns as numpy arrays, which Bokeh writes into the
    page as binary buffers rather than JSON numbers (smaller, and faster to read)."""
    import numpy as np

    return {k: np.asarray(v, dtype=np.float64) if k in NUMERIC else v for k, v in data.items()}


def split(gantt: Gantt, layout: Layout) -> tuple[Table, Table]:
    """The run and the planned rectangles."""
    rows = table(gantt, layout)
    planned = [is_planned(k) for k in rows.kind]
    return rows.where([not p for p in planned]), rows.where(planned)


def figure_of(gantt: Gantt, layout: Layout, *, height: int = 700, follow: bool = False) -> Model:
    """The chart's Bokeh figure. ``follow``: the time axis fits the data as it changes
    (the live page) rather than staying on the span of the bars drawn now."""
    from bokeh.models import ColumnDataSource, DataRange1d, HoverTool, Range1d
    from bokeh.models.annotations import Legend, LegendItem, Span
    from bokeh.plotting import figure

    lo, hi = gantt.span()
    unit, unit_name = time_unit(hi - lo)
    run_rows, plan_rows = split(gantt, layout)
    fig = figure(
        title=f"{gantt.title}: {gantt.jobs} jobs",
        sizing_mode="stretch_width",
        height=height,
        x_range=DataRange1d(range_padding=0.02, name="x")
        if follow
        else Range1d(start=lo / unit, end=hi / unit, name="x"),
        y_range=Range1d(start=0, end=layout.height, name="y"),
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        active_scroll="xwheel_zoom",
        x_axis_label=f"time ({unit_name}; {gantt.time_base})",
        y_axis_label="machines and their CPUs",
        name="gantt",
    )
    run = fig.quad(
        left="x0",
        right="x1",
        bottom="bottom",
        top="top",
        source=ColumnDataSource(packed(source_data(run_rows, unit)), name="run"),
        fill_color="colour",
        fill_alpha=RUN_ALPHA,
        line_color="outline",
        line_width="outline_width",
    )
    planned = fig.quad(
        left="x0",
        right="x1",
        bottom="bottom",
        top="top",
        source=ColumnDataSource(packed(source_data(plan_rows, unit)), name="planned"),
        fill_color="colour",
        fill_alpha=PLANNED_ALPHA,
        hatch_pattern="/",
        hatch_color="colour",
        hatch_alpha=0.6,
        line_color="outline",
        line_width="outline_width",
        line_dash="dashed",
    )
    fig.add_tools(HoverTool(renderers=[run, planned], tooltips=TOOLTIPS))
    fig.add_layout(
        Span(
            location=(gantt.now if gantt.now is not None else lo) / unit,
            dimension="height",
            line_color=NOW,
            line_dash="dashed",
            line_width=2,
            visible=gantt.now is not None,
            name="now",
        )
    )
    for band in layout.bands:
        fig.add_layout(Span(location=band.bottom, dimension="width", line_color="#999999"))
    fig.yaxis.ticker = [b.bottom + b.height / 2 for b in layout.bands]
    fig.yaxis.major_label_overrides = {b.bottom + b.height / 2: b.label for b in layout.bands}
    fig.ygrid.visible = False
    fig.add_layout(
        Legend(
            items=[
                # Bokeh types a legend's renderers as glyphs in general (invariant list).
                LegendItem(label="ran / running", renderers=[run]),  # type: ignore[list-item]
                LegendItem(label="planned", renderers=[planned]),  # type: ignore[list-item]
            ],
            location="top_left",
        )
    )
    return fig


def document(gantt: Gantt, *, layout: Layout | None = None) -> Document:
    """The chart as a Bokeh document that marks the page ready (module docstring)."""
    from bokeh.document import Document
    from bokeh.events import DocumentReady
    from bokeh.models import CustomJS

    doc = Document()
    doc.add_root(figure_of(gantt, layout or lay_out(gantt)))
    doc.js_on_event(DocumentReady, CustomJS(code=READY_JS))
    doc.title = gantt.title
    return doc


def write_html(path: Path, gantt: Gantt, *, layout: Layout | None = None) -> None:
    """``gantt`` as one HTML file with BokehJS inside it (opens offline)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    doc = document(gantt, layout=layout)
    path.write_text(file_html(doc, resources=INLINE, title=gantt.title), encoding="utf-8")
