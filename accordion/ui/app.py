"""``accordion ui``'s web application (Starlette): the page, its data and its updates.

Routes:

- ``/``: the page (``static/index.html``, ``static/page.js``), which draws
  the machines, the queue with each job's predicted start and reason, the
  running jobs with their CPUs and MPL, and the live Gantt chart;
- ``/bokeh.js``: BokehJS (the core bundle, from the installed package, so
  the page needs no network beyond this server);
- ``/api/state``: the current view as JSON (:func:`state`), with its
  ``version``;
- ``/api/gantt``: the Gantt figure to embed (Bokeh's ``json_item``); the page
  embeds it again only when its ``key`` (machines, rows, time unit) changes,
  and otherwise replaces its data, so a zoom survives updates;
- ``/events``: server-sent events, one ``version`` line each time the view
  changes (:class:`~accordion.ui.feed.ClusterFeed`); the page then fetches
  ``/api/state``.

The page shows what the login of :class:`ClusterFeed`'s client may see, as
``accordion status`` would: the application adds nothing to it and reads no
other source. It is read-only: nothing on the page acts on the cluster.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import cache
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from accordion.gantt.bars import Gantt
from accordion.gantt.html import figure_of, source_data, split
from accordion.gantt.layout import Layout, lay_out
from accordion.gantt.live import predicted_start, wait_reason
from accordion.gantt.style import time_unit
from accordion.ui.feed import ClusterFeed
from broker.messages import JobStatus, StatusReply

#: Seconds an event stream waits for a change before it sends a comment (keeps proxies
#: and the browser from closing a quiet stream).
KEEPALIVE = 15.0


@cache
def _static(name: str) -> str:
    return resources.files("accordion.ui").joinpath("static", name).read_text(encoding="utf-8")


@cache
def _bokeh_js() -> str:
    from bokeh.resources import Resources  # noqa: PLC0415 (only when a page asks)

    return "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw)


def _cpus(job: JobStatus) -> int:
    return sum(p.cpus for p in job.parts)


def _job_row(job: JobStatus) -> dict[str, Any]:
    cpus = _cpus(job)
    return {
        "id": job.id,
        "user": job.user,
        "state": job.state,
        "procs": job.procs,
        "submit": job.submit,
        "walltime": job.walltime,
        "deadline": job.deadline,
        "start": job.start,
        "est_end": job.est_end,
        "cpus": cpus,
        "mpl": job.procs / cpus if cpus else None,
        "parts": ", ".join(f"{p.machine}:{p.cpus}" for p in job.parts),
        "predicted_start": predicted_start(job),
        "reason": wait_reason(job),
    }


def _gantt_key(gantt: Gantt, layout: Layout) -> str:
    lo, hi = gantt.span()
    _, unit = time_unit(hi - lo)
    bands = ";".join(f"{b.machine}:{b.bottom}:{b.height}" for b in layout.bands)
    return f"{unit}|{bands}"


def state(feed: ClusterFeed, identity: str | None) -> dict[str, Any]:
    """The view as the page reads it (times in cluster seconds)."""
    timeline = feed.timeline
    reply: StatusReply | None = timeline.status_reply
    gantt = timeline.gantt()
    layout = lay_out(gantt)
    lo, hi = gantt.span()
    unit, _ = time_unit(hi - lo)
    run, planned = split(gantt, layout)
    return {
        "version": feed.version,
        "error": feed.error,
        "unconfirmed": feed.unconfirmed,
        "identity": identity,
        "now": None if reply is None else reply.now,
        "machines": []
        if reply is None
        else [
            {"id": m.id, "cpus": m.cpus, "free": m.free, "speed": m.speed, "online": m.online}
            for m in reply.machines
        ],
        "queue": [] if reply is None else [_job_row(j) for j in reply.queue],
        "running": [] if reply is None else [_job_row(j) for j in reply.running],
        "gantt": {
            "key": _gantt_key(gantt, layout),
            "run": source_data(run, unit),
            "planned": source_data(planned, unit),
            "now": None if gantt.now is None else gantt.now / unit,
            "height": layout.height,
            "jobs": gantt.jobs,
        },
    }


def create_app(
    feed: ClusterFeed,
    *,
    identity: str | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """The application over ``feed`` (which its ``lifespan`` runs, if given)."""

    async def page(_: Request) -> Response:
        return HTMLResponse(_static("index.html"))

    async def page_js(_: Request) -> Response:
        return Response(_static("page.js"), media_type="text/javascript")

    async def bokeh_js(_: Request) -> Response:
        return Response(
            _bokeh_js(),
            media_type="text/javascript",
            headers={"Cache-Control": "max-age=3600"},
        )

    # One view is laid out once, whatever the number of pages that ask for it.
    drawn: dict[int, bytes] = {}

    async def api_state(_: Request) -> Response:
        version = feed.version
        if version not in drawn:
            drawn.clear()
            drawn[version] = bytes(JSONResponse(state(feed, identity)).body)
        return Response(drawn[version], media_type="application/json")

    async def api_gantt(_: Request) -> Response:
        from bokeh.embed import json_item  # noqa: PLC0415 (only when a page asks)

        gantt = feed.timeline.gantt()
        layout = lay_out(gantt)
        item = json_item(figure_of(gantt, layout, height=520, follow=True))
        return JSONResponse({"key": _gantt_key(gantt, layout), "item": item})

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            seen = -1
            while not await request.is_disconnected():
                version = await feed.wait_past(seen, KEEPALIVE)
                if version == seen:
                    yield ": still here\n\n"
                    continue
                seen = version
                yield f"data: {json.dumps({'version': version})}\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def no_icon(_: Request) -> Response:
        return Response(status_code=204)  # the browser asks; the page has none

    routes = [
        Route("/", page),
        Route("/favicon.ico", no_icon),
        Route("/page.js", page_js),
        Route("/bokeh.js", bokeh_js),
        Route("/api/state", api_state),
        Route("/api/gantt", api_gantt),
        Route("/events", events),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
