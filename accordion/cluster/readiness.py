"""When a started cluster is up (every machine online, every metrics endpoint answering),
and when a stopping one's scheduler has heard its agents stop.

:meth:`accordion.cluster.local_cluster.LocalCluster.ready` waits here, and so does
its stop, between the agents and the scheduler (:func:`until_stops_heard`). The scheduler's
``StatusReply`` says which machines are online (pages of machines only, so a
long queue does not slow the check down); the endpoints are probed over
HTTP, all at once in threads (urllib blocks), so hundreds of agents take no
longer than one. Meanwhile ``check`` is called between attempts, so a child
that exits ends the wait with its own error (and its log's tail) instead of a
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from accordion.client.live_client import LiveClient, NoReplyError, run_async
from accordion.cluster.processes import UpError
from accordion.errors import LiveError
from broker.bus import BusError
from broker.messages import MachineStatus


async def until_ready(
    client: LiveClient,
    *,
    machines: Collection[str],
    endpoints: Sequence[str],
    check: Callable[[], None],
    timeout: float,
    where: Path,
) -> list[MachineStatus]:
    """The first machine list that has ``machines`` online, once every URL of
    ``endpoints`` answers 200; :class:`UpError` after ``timeout`` wall seconds
    (naming what was missing and ``where`` the logs are)."""
    wanted = set(machines)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    missing: set[str] = set(wanted)
    status: list[MachineStatus] | None = None
    # Short at first: a request sent before the scheduler subscribed is lost. Longer
    # after each miss: a scheduler busy registering thousands of agents answers
    # late, and asking again meanwhile only adds to its work.
    wait = 1.0
    while loop.time() < deadline:
        check()
        try:
            status = await client.machines(timeout=wait)
        except NoReplyError:
            wait = min(2 * wait, 8.0)
            continue
        missing = wanted - {m.id for m in status if m.online}
        if not missing:
            break
        await asyncio.sleep(0.1)
    if status is None or missing:
        check()
        some = ", ".join(sorted(missing)[:5]) + (", ..." if len(missing) > 5 else "")
        what = (
            "the scheduler did not answer"
            if status is None
            else f"{len(missing)} of {len(wanted)} machines offline: {some}"
        )
        raise UpError(f"the cluster was not up in {timeout:g} s ({what}); logs in {where}")
    down = list(endpoints)
    while True:
        async with asyncio.TaskGroup() as tg:
            probes = {
                url: tg.create_task(asyncio.to_thread(_get_ok, url), name=f"probe-{url}")
                for url in down
            }
        down = [url for url, probe in probes.items() if not probe.result()]
        if not down:
            return status
        if loop.time() > deadline:
            raise UpError(f"metrics endpoints not answering: {', '.join(down)}")
        check()
        await asyncio.sleep(0.1)


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def scrape(url: str, *, timeout: float = 5.0) -> str:
    """The Prometheus text an endpoint serves."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text: bytes = response.read()
    return text.decode()


def until_stops_heard(
    connect: Callable[..., contextlib.AbstractAsyncContextManager[LiveClient]],
    machines: Collection[str],
    grace: float,
) -> None:
    """Until the scheduler (reached through ``connect``) hears none of ``machines``
    (their agents said they stop), for at most ``grace`` wall seconds. A scheduler
    that does not answer is not waited for: its restart reconciles with what the
    agents report. Runs in a thread of its own, so the caller may be running an
    event loop (a bench's)."""
    wanted = set(machines)

    async def look() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        async with connect(timeout=2.0) as client:
            while loop.time() < deadline:
                # Machines only: a long queue does not slow a stop down either.
                machines = await client.machines()
                if not wanted & {m.id for m in machines if m.online}:
                    return
                await asyncio.sleep(0.05)

    def run() -> None:
        with contextlib.suppress(LiveError, BusError, OSError, TimeoutError):
            run_async(look())

    watcher = threading.Thread(target=run, name="stops-heard", daemon=True)
    watcher.start()
    watcher.join(grace + 5.0)
